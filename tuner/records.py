"""Former name of :mod:`tuner.request_records` (the load generator's per-request records,
not trial records: see :mod:`tuner.trial_record`); kept so that existing imports keep
working."""

from tuner.request_records import LevelRecords, RequestRecord

__all__ = ["LevelRecords", "RequestRecord"]
