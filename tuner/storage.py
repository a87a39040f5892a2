"""Where studies live: the study databases, their URLs, and opening a study to read.

A study's storage is an Optuna RDB (SQLite under ``./studies`` by default, or any URL
such as PostgreSQL for distributed workers); the trials' user attributes in it are the
study's whole state (:mod:`tuner.trial_record`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import optuna
import sqlalchemy
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

#: Directory of study databases, relative to the working directory.
STUDIES_DIR = Path("studies")
#: RDB heartbeat: a worker that stops beating for GRACE seconds has its trial failed and
#: retried once (Optuna's stale-trial machinery).
HEARTBEAT_S = float(os.environ.get("TUNER_HEARTBEAT_S", "30"))
GRACE_S = int(float(os.environ.get("TUNER_GRACE_S", "120")))


def default_storage_url(study_name: str) -> str:
    STUDIES_DIR.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{STUDIES_DIR / study_name}.db"


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An RDB storage with heartbeats (stale trials failed and retried once)."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    if url.startswith("sqlite:///"):
        _enable_wal(url)
    last: Exception | None = None
    for attempt in range(8):
        try:
            return RDBStorage(
                url,
                heartbeat_interval=HEARTBEAT_S,
                grace_period=GRACE_S,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1),
                engine_kwargs={"pool_pre_ping": True} if not url.startswith("sqlite") else None,
            )
        except sqlalchemy.exc.DBAPIError as exc:
            # Workers starting at once race to create the schema; the loser finds it made.
            last = exc
            time.sleep(0.2 * (attempt + 1))
    assert last is not None
    raise last


def _enable_wal(url: str) -> None:
    """Write-ahead logging: readers (the dashboard) do not block the study, and a commit costs
    microseconds instead of a disk sync per trial attribute. The mode persists in the file."""
    import sqlite3

    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def redact_url(url: str) -> str:
    """Hide the password of a database URL (``user:***@host``)."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    if ":" in creds:
        creds = creds.split(":", 1)[0] + ":***"
    return f"{scheme}://{creds}@{host}"


def resolve_storage(study_name: str | None, storage: str | None) -> tuple[str, str]:
    """(storage URL, study name) of an existing study; with no name, the newest in ./studies.

    Raises LookupError naming what is missing.
    """
    if storage is None:
        if study_name is None:
            dbs = sorted(STUDIES_DIR.glob("*.db"), key=os.path.getmtime)
            if not dbs:
                raise LookupError("no study found in ./studies (run `tuner search` first, or pass --storage)")
            storage = f"sqlite:///{dbs[-1]}"
        else:
            path = STUDIES_DIR / f"{study_name}.db"
            if not path.exists():
                raise LookupError(f"no study database {path} (pass --storage for another location)")
            storage = f"sqlite:///{path}"
    names = [s.study_name for s in optuna.get_all_study_summaries(_reader(storage))]
    if study_name is None:
        if not names:
            raise LookupError(f"no study in {redact_url(storage)}")
        study_name = names[-1]
    elif study_name not in names:
        raise LookupError(
            f"no study named {study_name!r} in {redact_url(storage)}; found: {', '.join(names) or 'none'}"
        )
    return storage, study_name


def _reader(url: str) -> optuna.storages.BaseStorage | str:
    return optuna.storages.RDBStorage(url) if "://" in url else url


def load_study(study_name: str | None, storage: str | None) -> optuna.Study:
    """Open an existing study for reading (see :func:`resolve_storage`)."""
    url, name = resolve_storage(study_name, storage)
    return optuna.load_study(study_name=name, storage=_reader(url))
