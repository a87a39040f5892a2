"""Several workers, one study: an exact trial budget, heartbeats, safe study creation.

Optuna's RDB storage is the coordinator (no home-made server): every worker, in this
process or on another machine, asks the storage for its next trial. Two things Optuna
leaves to the caller are done here:

* **The budget gate.** ``--budget N`` means exactly N finished trials in the whole study.
  A worker counts finished + running trials and asks for a new one inside a lock that
  every worker of the study shares: ``flock`` on a file beside a SQLite database, a
  PostgreSQL advisory lock for a PostgreSQL storage, a process-local lock otherwise.
* **Heartbeats for ask-and-tell.** ``study.optimize`` beats for its own trials; the worker
  loop uses ask/tell (to gate each ask), so it runs the same beat itself. A worker that
  stops beating for the grace period has its trial failed (and, by the storage's
  stale-trial callback, retried once) by whichever worker asks next.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optuna.storages import BaseStorage, RDBStorage


class BudgetGate:
    """A lock shared by every worker of one study (see module docstring)."""

    def __init__(self, storage: BaseStorage, url: str, study_name: str):
        self._local = threading.Lock()
        self._file: Path | None = None
        self._pg_key: int | None = None
        self._storage = storage
        if url.startswith("sqlite:///"):
            self._file = Path(url.removeprefix("sqlite:///") + ".lock")
        elif url.startswith("postgresql") and isinstance(storage, RDBStorage):
            self._pg_key = zlib.crc32(f"tuner:{study_name}".encode())

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self._local:
            if self._file is not None:
                self._file.parent.mkdir(parents=True, exist_ok=True)
                with open(self._file, "a") as fh:
                    fcntl.flock(fh, fcntl.LOCK_EX)
                    try:
                        yield
                    finally:
                        fcntl.flock(fh, fcntl.LOCK_UN)
            elif self._pg_key is not None:
                from sqlalchemy import text

                from tuner.storage import retry_through_outage

                engine = self._storage.engine  # type: ignore[attr-defined]

                def lock() -> Any:
                    conn = engine.connect()
                    try:
                        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": self._pg_key})
                    except BaseException:
                        conn.close()
                        raise
                    return conn

                conn = retry_through_outage(lock, "budget lock")
                try:
                    yield
                finally:
                    # A database restarted meanwhile released the lock with the session.
                    with contextlib.suppress(Exception):
                        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._pg_key})
                        conn.commit()
                    with contextlib.suppress(Exception):
                        conn.close()
            else:
                yield


class Heartbeat:
    """Records a trial's heartbeat every ``interval`` seconds until stopped."""

    def __init__(self, storage: BaseStorage, trial_id: int, interval: float):
        self._storage = storage
        self._trial_id = trial_id
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        if hasattr(self._storage, "record_heartbeat") and self._interval > 0:
            self._storage.record_heartbeat(self._trial_id)
            self._thread = threading.Thread(
                target=self._beat, name=f"heartbeat-{self._trial_id}", daemon=True
            )
            self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            with contextlib.suppress(Exception):  # a missed beat is retried at the next interval
                self._storage.record_heartbeat(self._trial_id)  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
