"""Who started a trial or a server, and whether that owner still lives.

A study outlives the processes that run it (Ctrl-C, ``kill -9``, a reboot), and several
processes may work on one study at once. Before a run stops a server it did not start,
or fails a trial it did not run, it asks the owner recorded with them: a process is
named by its host, the host's boot id, its pid and its start time (a reused pid has
another start time), plus a random run id. An owner on this host is known dead or alive
at once; one on another host only by its heartbeat (see :mod:`tuner.coordination`).
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    """This host's boot id (changes at every boot); empty where the kernel has none."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot; None if it is gone.

    Zombies count as gone: a dead owner reparented to a non-reaping init stays a zombie.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass(frozen=True)
class Owner:
    """The process that started a trial or a server."""

    host: str
    boot_id: str
    pid: int
    start: int | None
    run_id: str

    @classmethod
    def of(cls, data: Any) -> Owner | None:
        """The owner stored as a dict (a trial attribute, a pid file); None if unreadable."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                host=str(data["host"]),
                boot_id=str(data.get("boot_id", "")),
                pid=int(data["pid"]),
                start=None if data.get("start") is None else int(data["start"]),
                run_id=str(data.get("run_id", "")),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def local(self) -> bool:
        """The owner ran on this host (same host name)."""
        return self.host == socket.gethostname()

    def alive(self) -> bool | None:
        """True/False for an owner on this host; None (unknown) for another host's."""
        if not self.local:
            return None
        if self.boot_id and self.boot_id != boot_id():
            return False  # the host rebooted since
        started = process_start(self.pid)
        if started is None:
            return False
        return self.start is None or started == self.start

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} (run {self.run_id[:8]})"


@functools.cache
def _run_id(pid: int) -> str:
    return uuid.uuid4().hex


def current() -> Owner:
    """This process as an owner (the run id is drawn once per process)."""
    pid = os.getpid()
    return Owner(
        host=socket.gethostname(), boot_id=boot_id(), pid=pid, start=process_start(pid), run_id=_run_id(pid)
    )
