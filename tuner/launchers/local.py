"""The ``local`` backend: the server as a child process of the tuner, on this host."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from tuner import ownership
from tuner.errors import UsageError
from tuner.failures import LaunchFailure
from tuner.launchers.base import Launcher, bind_address, read_tail
from tuner.net import connect_host, http_url, local_port_in_use
from tuner.server_env import server_environment

if TYPE_CHECKING:
    from tuner.engines.base import Engine, LaunchSpec


def process_group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs.

    Zombies do not count: a worker orphaned when its parent died is reparented to init,
    and an init that does not reap (some containers) would leave it a zombie forever.
    Read from ``/proc`` where there is one, else by ``killpg(pgid, 0)``.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the process group led by ``proc``, wait up to ``grace_s`` for the whole
    group to be gone, then SIGKILL what is left; ``proc`` is reaped. A
    ``KeyboardInterrupt`` during the grace period (a second Ctrl-C) skips to SIGKILL,
    then propagates."""
    pgid = proc.pid  # start_new_session=True: the child leads its own session and group
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
        os.killpg(pgid, signal.SIGCONT)  # a stopped (SIGSTOP) server must run to handle its SIGTERM
    try:
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader, so that it does not keep the group "alive"
            if proc.returncode is not None and not process_group_alive(pgid):
                return
            time.sleep(0.05)
    except KeyboardInterrupt:
        _kill_group(proc, pgid)
        raise
    _kill_group(proc, pgid)


def _kill_group(proc: subprocess.Popen, pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        logger.warning(f"process {pgid} did not exit after SIGKILL")
    end = time.monotonic() + 5
    while process_group_alive(pgid) and time.monotonic() < end:
        time.sleep(0.05)


#: Environment variable carrying the port a launched server was started for.
#: Not a ``TUNER_*`` name: a server never gets those (:mod:`tuner.server_env`).
SLOT_ENV = "LLM_TUNER_SLOT"


def _slot_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or str(Path.home() / ".cache")
    return Path(base) / "tuner"


def pid_file(port: int) -> Path:
    """Where the local server launched for ``port`` and its owner are kept between runs."""
    return _slot_dir() / f"local-{port}.pid"


#: Lock files of the slots (ports) this process holds, kept open for its whole life.
_CLAIMED: dict[int, int] = {}


class SlotTaken(UsageError):
    """Another live tuner process on this host runs servers on the same port."""


def claim_slot(port: int) -> None:
    """Hold ``port`` for this process until it exits (an ``flock``, released by the kernel
    when the process dies, however it dies).

    Two searches on one host launching servers on one port would stop each other's
    servers; the second one is refused with the first one's owner named. Raises
    :class:`SlotTaken` (a usage error: exit 2, nothing launched).
    """
    if port in _CLAIMED:
        return
    path = _slot_dir() / f"local-{port}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = ownership.Owner.of(_read_json(path))
        os.close(fd)
        who = holder.describe() if holder else "another process"
        raise SlotTaken(
            f"port {port} is in use by another tuner run on this host ({who}); wait for it to finish, "
            "or give this search another --port in its space (a separate slot)"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(ownership.current().as_dict()).encode())
    _CLAIMED[port] = fd


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def stop_leftover(port: int, grace_s: float) -> bool:
    """Stop a server an earlier run left behind on ``port`` (a killed worker, say).

    Only when the run that started it is dead (:mod:`tuner.ownership`): a live run's
    server is never stopped, it is reported as ``port-busy``. And only when the process
    still carries this tuner's slot marker for that port in its environment, so a reused
    pid of an unrelated process is never signalled. Returns True when a leftover was
    found and stopped.
    """
    path = pid_file(port)
    data = _read_json(path)
    try:
        pid = int(data["pgid"]) if isinstance(data, dict) else int(str(data).split()[0])
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError, KeyError, TypeError):
        with contextlib.suppress(OSError):
            path.unlink()
        return False
    if f"{SLOT_ENV}={port}".encode() not in environ:
        path.unlink(missing_ok=True)
        return False
    owner = ownership.Owner.of(data.get("owner")) if isinstance(data, dict) else None
    if owner is not None and owner.alive() and owner.run_id != ownership.current().run_id:
        raise LaunchFailure(
            "port-busy", f"port {port} is served by a live tuner run ({owner.describe()}); nothing launched"
        )
    logger.warning(f"stopping a server left behind on port {port} by a run that died (pgid {pid})")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
        os.killpg(pid, signal.SIGCONT)  # a stopped server must run to handle its SIGTERM
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and process_group_alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)
    return True


class LocalLauncher(Launcher):
    """The launch command as a child process in its own session and process group.

    Output (stdout and stderr) goes to the trial's log file. Health is polled over
    HTTP on the address from the command's ``--host``/``--port``. ``stop`` signals the
    whole process group, so the engine's worker processes (SGLang starts one scheduler
    per GPU, plus a detokenizer) go with it.
    """

    backend = "local"

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        cwd: Path | None = None,
        inherit_env: bool = True,
        **options: Any,
    ):
        """``cwd``: working directory of the server (default: the tuner's). The server
        gets the allow-listed part of the tuner's environment plus ``spec.env``
        (:mod:`tuner.server_env`; ``inherit_env=False``: only ``spec.env`` and ``PATH``).
        Other options: see :class:`Launcher`."""
        super().__init__(engine, **options)
        self.cwd = cwd
        self.inherit_env = inherit_env
        self.proc: subprocess.Popen | None = None
        self._host = "127.0.0.1"
        self._port = 0

    def start(self, spec: LaunchSpec, *, log_path: Path, trial_label: str) -> None:
        log_file = self._begin(spec, log_path, trial_label)
        self.proc = None
        bind_host, port = bind_address(spec)
        self._host, self._port = connect_host(bind_host), port
        claim_slot(port)
        stop_leftover(port, self.stop_grace_s)
        if local_port_in_use(bind_host, port):
            raise LaunchFailure(
                "port-busy", f"port {port} on {bind_host} is already in use; nothing launched"
            )
        inherited = os.environ if self.inherit_env else {"PATH": os.environ.get("PATH", os.defpath)}
        env = server_environment(inherited, spec.env)
        env[SLOT_ENV] = str(port)  # marks the server as ours, for a later run's leftover check
        with open(log_file, "wb") as log:
            try:
                self.proc = subprocess.Popen(
                    list(spec.argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise UsageError(f"cannot run {spec.argv[0]!r}: {exc.strerror or exc}") from exc
        self._owned = True
        pid_file(port).parent.mkdir(parents=True, exist_ok=True)
        pid_file(port).write_text(
            json.dumps({"pgid": self.proc.pid, "owner": ownership.current().as_dict(), "trial": trial_label})
        )
        self._launched()

    def base_url(self) -> str:
        return http_url(self._host, self._port)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pgid(self) -> int | None:
        """The server's process group (its pid), while this launcher owns one."""
        return self.proc.pid if self.proc is not None else None

    def log_tail(self, lines: int = 80) -> str:
        return read_tail(self.log_path, lines) if self.log_path else ""

    def _still_running(self) -> str | None:
        if self.proc is not None and self.proc.poll() is None:
            return f"server still running (pid {self.proc.pid})"
        return None

    def _exit_status(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def stop(self) -> None:
        # The Popen object stays: its exit status serves classify_exit().
        if not self._release() or self.proc is None:
            return
        try:
            stop_process_group(self.proc, self.stop_grace_s)
        except Exception as exc:  # stop() never raises
            logger.warning(f"stopping {self.trial_label} (pgid {self.proc.pid}) failed: {exc}")
        data = _read_json(pid_file(self._port))
        if isinstance(data, dict) and data.get("pgid") == self.proc.pid:
            pid_file(self._port).unlink(missing_ok=True)

    def _pause(self, seconds: float) -> None:
        if self.proc is None:
            time.sleep(seconds)
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=seconds)  # wakes at once when the server exits
