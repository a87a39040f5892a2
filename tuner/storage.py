"""Where studies live: the study databases, their URLs, and opening a study to read.

A study's storage is an Optuna RDB (SQLite under ``./studies`` by default, or any URL
such as PostgreSQL for distributed workers); the trials' user attributes in it are the
study's whole state (:mod:`tuner.trial_record`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import optuna
import sqlalchemy
from loguru import logger
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

from tuner.errors import UsageError

T = TypeVar("T")

#: Directory of study databases, relative to the working directory.
STUDIES_DIR = Path("studies")
#: RDB heartbeat: a worker that stops beating for GRACE seconds has its trial failed and
#: retried once (Optuna's stale-trial machinery).
HEARTBEAT_S = float(os.environ.get("TUNER_HEARTBEAT_S", "30"))
GRACE_S = int(float(os.environ.get("TUNER_GRACE_S", "120")))


#: A study name: a file name under ./studies and a directory of artifacts, never a path.
_STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
#: Attempts at opening a storage that does not answer (a database restarting).
OPEN_ATTEMPTS = 8


class StorageError(UsageError):
    """The storage cannot be opened: a bad URL, a database that does not answer, refused
    credentials. One line, exit 2; the URL's password is never in it."""


def check_study_name(name: str) -> str:
    """``name`` if it is a name (letters, digits, ``._+-``; no ``/``, no ``..``)."""
    if not _STUDY_NAME.match(name) or ".." in name:
        raise UsageError(
            f"study name {name!r}: use letters, digits and . _ + - (no path separators, no '..')"
        )
    return name


def default_storage_url(study_name: str) -> str:
    check_study_name(study_name)
    return f"sqlite:///{STUDIES_DIR / study_name}.db"


def _is_auth_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(w in text for w in ("authentication failed", "access denied", "no password supplied"))


def storage_error(url: str, exc: BaseException) -> StorageError:
    """One line naming the storage (password hidden) and what went wrong."""
    from tuner import redact

    if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
        exc = exc.__cause__  # Optuna's wrapper says only that a commit failed
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = detail[0] if detail else type(exc).__name__
    return StorageError(redact.text(f"cannot open storage {redact_url(url)}: {first}"))


#: How long a storage call waits for a database that stopped answering (a restart, a
#: failover) before the error is raised: a study overnight outlives a database restart.
OUTAGE_S = float(os.environ.get("TUNER_STORAGE_OUTAGE_S", "300"))
#: Storage methods not retried: schema versions (read once, at opening).
_NOT_RETRIED = frozenset(
    {"upgrade", "get_current_version", "get_head_version", "get_all_versions", "remove_session"}
)


def disk_full(exc: BaseException | None) -> bool:
    """``exc`` (or what caused it) says the disk is full: SQLite's "database or disk is
    full", or an ``OSError`` with ``ENOSPC``."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if "database or disk is full" in str(exc) or "No space left on device" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def transient(exc: BaseException) -> bool:
    """A database error that a restart or a dropped connection explains (not a bad query,
    not refused credentials); Optuna wraps some in its StorageInternalError."""
    if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
        exc = exc.__cause__
    lost = (
        sqlalchemy.exc.OperationalError,
        sqlalchemy.exc.InterfaceError,
        sqlalchemy.exc.PendingRollbackError,
    )
    return isinstance(exc, lost) and not _is_auth_error(exc) and not disk_full(exc)


def retry_through_outage(
    call: Callable[[], T], what: str = "storage", on_retry: Callable[[], object] | None = None
) -> T:
    """``call()``, repeated while the database is unreachable (up to :data:`OUTAGE_S`);
    ``on_retry`` runs before each new attempt (to drop a session the outage broke)."""
    deadline = time.monotonic() + OUTAGE_S
    pause = 0.2
    warned = False
    while True:
        try:
            return call()
        except (sqlalchemy.exc.DBAPIError, optuna.exceptions.StorageInternalError) as exc:
            if not transient(exc) or time.monotonic() > deadline:
                raise
            if not warned:
                logger.warning(f"{what}: the database does not answer; retrying for up to {OUTAGE_S:.0f} s")
                warned = True
            time.sleep(pause)
            pause = min(pause * 2, 5.0)
            if on_retry is not None:
                with contextlib.suppress(Exception):
                    on_retry()


class ResilientRDBStorage(RDBStorage):
    """An RDB storage whose calls wait out a database outage (:func:`retry_through_outage`):
    a PostgreSQL restart in the middle of a study costs the workers a pause, not the study."""


def _retrying(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: RDBStorage, *args: Any, **kwargs: Any) -> Any:
        return retry_through_outage(
            lambda: method(self, *args, **kwargs), f"storage {method.__name__}", self.scoped_session.remove
        )

    return wrapper


#: What opening a storage to read raises when it cannot (a bad URL, a database that refuses
#: the credentials: Optuna wraps a failed first query in its StorageInternalError).
_READ_ERRORS = (
    sqlalchemy.exc.SQLAlchemyError,
    optuna.exceptions.StorageInternalError,
    ImportError,
    ValueError,
)

#: Private methods Optuna's cached storage calls on the RDB storage (Optuna 5).
_CACHED_STORAGE_CALLS = (
    "_create_new_trial",
    "_get_best_trial_id",
    "_get_stale_trial_ids",
    "_get_trials",
    "_set_trial_param",
)

for _name in [*dir(RDBStorage), *_CACHED_STORAGE_CALLS]:
    public = not _name.startswith("_") and _name not in _NOT_RETRIED
    if (public or _name in _CACHED_STORAGE_CALLS) and callable(getattr(RDBStorage, _name, None)):
        setattr(ResilientRDBStorage, _name, _retrying(getattr(RDBStorage, _name)))


def open_storage(url: str) -> ResilientRDBStorage:
    """An RDB storage with heartbeats (stale trials failed and retried once).

    A database that does not answer is tried again for a few seconds (workers starting
    at once race to create the schema; a server may be restarting); refused credentials
    and bad URLs are not. Raises :class:`StorageError`.
    """
    from tuner import redact

    redact.register_url(url)
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        _enable_wal(url)
    last: Exception | None = None
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return ResilientRDBStorage(
                url,
                # Optuna annotates the interval as int, but it is only a timeout for Event.wait, so a
                # fraction of a second works (the fault tests use 0.5 s).
                heartbeat_interval=HEARTBEAT_S,  # type: ignore[arg-type]
                grace_period=GRACE_S,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1),
                engine_kwargs={"pool_pre_ping": True} if not url.startswith("sqlite") else None,
            )
        except sqlalchemy.exc.DBAPIError as exc:
            if _is_auth_error(exc):
                raise storage_error(url, exc) from None
            last = exc
            time.sleep(0.2 * (attempt + 1))
        except (sqlalchemy.exc.ArgumentError, ImportError, ValueError) as exc:
            raise storage_error(url, exc) from None
    assert last is not None
    raise storage_error(url, last)


def _enable_wal(url: str) -> None:
    """Write-ahead logging: readers (the dashboard) do not block the study, and a commit costs
    microseconds instead of a disk sync per trial attribute. The mode persists in the file."""
    import sqlite3

    try:
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open storage {url}: {exc}") from None


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

    Reading creates nothing: a SQLite file that does not exist is reported, not made.
    Raises LookupError naming what is missing, :class:`StorageError` when the storage
    cannot be read.
    """
    if study_name is not None:
        check_study_name(study_name)
    if storage is not None and storage.startswith("sqlite:///"):
        path = Path(storage.removeprefix("sqlite:///"))
        if not path.is_file():
            raise LookupError(f"no study database {path}")
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
    try:
        names = [s.study_name for s in optuna.get_all_study_summaries(_reader(storage))]
    except _READ_ERRORS as exc:
        raise storage_error(storage, exc) from None
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
    from tuner import redact

    redact.register_url(url)
    if "://" not in url:
        return url
    try:
        return optuna.storages.RDBStorage(url, skip_table_creation=True)
    except _READ_ERRORS as exc:
        raise storage_error(url, exc) from None


def load_study(study_name: str | None, storage: str | None) -> optuna.Study:
    """Open an existing study for reading (see :func:`resolve_storage`)."""
    url, name = resolve_storage(study_name, storage)
    try:
        return optuna.load_study(study_name=name, storage=_reader(url))
    except _READ_ERRORS as exc:
        raise storage_error(url, exc) from None
