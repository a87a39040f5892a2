"""The launcher interface: start a server for one trial, wait until it serves, stop it.

A trial restarts the serving engine with new settings, so every backend (a local
process, a process on a host reached by ssh, a systemd unit) must answer the same
questions in the same terms: did it come up, how long did that take, where do I send
requests, is it still alive, why did it die, and make sure it is gone. The study code
only sees :class:`Launcher`; the backend is picked by ``--backend``.

The rule every implementation keeps: **the server is always stopped**. ``stop()`` is
idempotent and never raises; ``wait_healthy`` stops the server itself before raising
(a failure, a timeout, ``KeyboardInterrupt``); a launcher is a context manager whose
exit calls ``stop()``; and servers still running when the interpreter exits are
stopped by an ``atexit`` hook.
"""

from __future__ import annotations

import atexit
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

import httpx
from loguru import logger

from tuner.failures import LaunchFailure

if TYPE_CHECKING:
    from tuner.engines.base import Engine, LaunchSpec

#: ``on_progress(elapsed_s, state)``: called after every health probe. ``elapsed_s`` is
#: the time since launch; ``state`` is ``"starting"`` (no HTTP answer yet),
#: ``"loading"`` (an HTTP answer other than 200, e.g. 503 while weights load) or
#: ``"healthy"``.
ProgressCallback = Callable[[float, str], None]

#: Where a server that names no ``--host`` is reached.
DEFAULT_HOST = "127.0.0.1"

#: Health probes must answer quickly; a hung probe must not eat the whole timeout.
DEFAULT_HEALTH_REQUEST_TIMEOUT_S = 10.0
#: SIGTERM first: engines free GPU memory and NCCL state on a clean shutdown.
DEFAULT_STOP_GRACE_S = 30.0


def bind_address(spec: LaunchSpec) -> tuple[str, int]:
    """The ``(bind host, port)`` a launch will listen on, from its parsed command line
    (the engine's default port when it names none; loopback when it names no host)."""
    args = spec.args
    return args.host or DEFAULT_HOST, args.port


def tail_lines(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``."""
    if lines <= 0:
        return ""
    parts = text.splitlines()
    return "\n".join(parts[-lines:])


def read_tail(path: Path, lines: int, max_bytes: int = 256 * 1024) -> str:
    """The last ``lines`` lines of a (possibly large) text file; empty if it is missing."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return ""
    return tail_lines(data.decode("utf-8", errors="replace"), lines)


class Closable(Protocol):
    def close(self) -> None: ...


class Launcher(ABC):
    """Starts, watches and stops one serving-engine process at a time.

    Lifecycle of a trial::

        with make_launcher("local", engine=engine) as launcher:
            launcher.start(spec, log_path=study_dir / "trial-3.log", trial_label="trial-3")
            seconds = launcher.wait_healthy(timeout_s=1800)
            ...measure against launcher.base_url()...
            if not launcher.alive():
                raise launcher.classify_exit()
        # stopped here, whatever happened

    A launcher can be reused: ``start`` stops the server it started before. Subclasses
    implement the abstract methods; :meth:`wait_healthy` and :meth:`classify_exit` are
    shared and rely on :meth:`alive`, :meth:`base_url`, :meth:`stop` and the
    ``_still_running``/``_exit_status`` hooks.
    """

    #: The ``--backend`` name.
    backend: ClassVar[str] = ""

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        stop_grace_s: float = DEFAULT_STOP_GRACE_S,
        health_request_timeout_s: float = DEFAULT_HEALTH_REQUEST_TIMEOUT_S,
        health_path: str | None = None,
    ):
        """``engine`` supplies the health path, ready line and failure patterns; when
        ``None`` it is looked up from ``spec.engine`` at each ``start``. ``stop_grace_s``
        is how long ``stop`` waits after SIGTERM before SIGKILL.
        ``health_request_timeout_s`` bounds one health request. ``health_path``
        overrides the engine's health endpoint (e.g. SGLang's ``/health_generate``,
        which runs a one-token generation, instead of ``/health``)."""
        self.engine = engine
        self._engine_given = engine is not None
        self.stop_grace_s = stop_grace_s
        self.health_request_timeout_s = health_request_timeout_s
        self.health_path = health_path
        self.spec: LaunchSpec | None = None
        self.log_path: Path | None = None
        self.trial_label: str = ""
        self._launched_at: float | None = None
        #: A local port forward to a remote server (the ssh-based launchers), closed on stop.
        self.tunnel: Closable | None = None
        #: True from launch until stop: the server is this launcher's to stop.
        self._owned = False

    # -- the interface -------------------------------------------------------------

    @abstractmethod
    def start(self, spec: LaunchSpec, *, log_path: Path, trial_label: str) -> None:
        """Launch the server described by ``spec`` and return without waiting for it.

        The server's output goes to ``log_path`` (for remote backends: fetched there).
        Raises ``LaunchFailure("port-busy")`` without launching anything when the port
        the server would listen on is taken, and ``LaunchFailure("unreachable")`` when
        the host cannot be reached.
        """

    @abstractmethod
    def base_url(self) -> str:
        """``http://host:port`` where the load generator reaches the server."""

    @abstractmethod
    def alive(self) -> bool:
        """Whether the server process still runs (not whether it is healthy)."""

    @abstractmethod
    def log_tail(self, lines: int = 80) -> str:
        """The last ``lines`` lines of the server's log."""

    def classify_exit(self) -> LaunchFailure:
        """Why the server died: the failure class from its exit status and its log
        (``crash`` unless the log says otherwise), by the engine's
        :meth:`~tuner.engines.base.Engine.classify_exit`. Meant for a server that died
        while being measured; returns the failure, the caller raises it (a ``crash``
        naming the server when it still runs, ``unreachable`` when its host is)."""
        try:
            running = self._still_running()
        except LaunchFailure as exc:
            return exc
        if running is not None:
            return LaunchFailure("crash", f"{self.trial_label}: {running}")
        log_text = read_tail(self.log_path, 10**6) if self.log_path else ""
        return self._engine().classify_exit(self._exit_status(), log_text, what=self.trial_label or "server")

    def route_lost(self) -> LaunchFailure | None:
        """A host failure that cut the route to the healthy server (an ssh forward whose
        connection dropped): the requests in flight failed for the host's reasons, not the
        configuration's, so what was measured since is no verdict on it. None for a
        server reached directly (the default)."""
        return None

    @abstractmethod
    def _still_running(self) -> str | None:
        """Bring the server's state and log up to date; ``None`` once it has exited, else
        what still runs, for the message (``server still running (pid 42)``)."""

    @abstractmethod
    def _exit_status(self) -> int | None:
        """The ended server's exit status (``subprocess``'s convention: a signal is
        negative); ``None`` when unknown."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the server and everything it started: SIGTERM, a grace period, then
        SIGKILL. Always safe to call, idempotent, never raises."""

    # -- shared behaviour -------------------------------------------------------------

    def interpreter(self) -> str | None:
        """The launch command's Python interpreter, resolved on the host that runs the
        server (an absolute path); None when the command is no Python or is not found.

        This is what a unit for the trial must run: the PATH of the machine running the
        tuner says nothing about the GPU host's.
        """
        from tuner.systemd_unit import is_python

        if self.spec is None or not self.spec.argv or not is_python(self.spec.argv[0]):
            return None
        argv0 = self.spec.argv[0]
        if argv0.startswith("/"):
            return argv0
        transport = getattr(self, "transport", None)
        try:
            return transport.which(argv0) if transport is not None else shutil.which(argv0)
        except LaunchFailure:
            return None

    def wait_healthy(
        self, timeout_s: float, *, poll_s: float = 2.0, on_progress: ProgressCallback | None = None
    ) -> float:
        """Poll the engine's health endpoint until it answers 200; return the seconds from
        launch to healthy.

        Raises :class:`LaunchFailure`: classified from the exit status and log when the
        server exits first (see :mod:`tuner.launchers.classify`), ``timeout`` when it is
        not healthy within ``timeout_s`` seconds from this call, ``unreachable`` when a
        remote host stops answering. The server is stopped before any exception leaves
        this method, ``KeyboardInterrupt`` included (which is re-raised as is).
        """
        if self.spec is None or self._launched_at is None:
            raise RuntimeError("wait_healthy() before start()")
        deadline = time.monotonic() + timeout_s
        request_s = self.health_request_timeout_s
        timeout = httpx.Timeout(request_s, connect=min(2.0, request_s))
        state = "starting"
        try:
            # trust_env=False: an HTTP(S)_PROXY set for downloads must not capture probes.
            with httpx.Client(timeout=timeout, trust_env=False) as client:
                while True:
                    if not self.alive():
                        raise self.classify_exit()
                    state = self._probe(client)
                    elapsed = time.monotonic() - self._launched_at
                    if on_progress is not None:
                        on_progress(elapsed, state)
                    if state == "healthy":
                        return elapsed
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise LaunchFailure(
                            "timeout",
                            f"{self.health_url()} not healthy within {timeout_s:g} s (last state: {state})",
                        )
                    self._pause(min(poll_s, remaining))
        except BaseException:
            self.stop()
            raise

    def health_url(self) -> str:
        """The engine's health endpoint under :meth:`base_url`."""
        return self.base_url() + (self.health_path or self._engine().health_path)

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- helpers for subclasses ---------------------------------------------------

    def _probe(self, client: httpx.Client) -> str:
        """One health request: ``healthy``, ``loading`` (HTTP answer, not 200) or
        ``starting`` (no HTTP answer)."""
        try:
            response = client.get(self.health_url())
        except httpx.HTTPError:
            return "starting"
        return "healthy" if response.status_code == 200 else "loading"

    def _pause(self, seconds: float) -> None:
        """Sleep between health probes; subclasses may wake early when the server exits."""
        time.sleep(seconds)

    def _engine(self) -> Engine:
        if self.engine is None:
            if self.spec is None:
                raise RuntimeError("no engine: pass engine= or start() a spec first")
            self.engine = resolve_engine(self.spec.engine)
        return self.engine

    def _begin(self, spec: LaunchSpec, log_path: Path, trial_label: str) -> Path:
        """Common start bookkeeping: stop a previous server, remember the trial. Returns the
        server log's path (also kept as :attr:`log_path`)."""
        self.stop()
        self.spec = spec
        self.log_path = Path(log_path)
        self.trial_label = trial_label
        self._launched_at = None
        if not self._engine_given:
            self.engine = None  # the spec names its engine
        self._engine()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        return self.log_path

    def _launched(self) -> None:
        """Mark the moment of launch (time to healthy counts from here)."""
        self._launched_at = time.monotonic()
        _RUNNING.add(self)

    def _stopped(self) -> None:
        _RUNNING.discard(self)

    def _release(self) -> bool:
        """The start of every ``stop()``: forget the server for the exit handler, close the
        tunnel to it, and take over ownership. True for the one call that must stop it."""
        self._stopped()
        if self.tunnel is not None:
            self.tunnel.close()
            self.tunnel = None
        owned, self._owned = self._owned, False
        return owned


def resolve_engine(name: str) -> Engine:
    """The engine adapter registered under ``name`` (``"sglang"``...)."""
    from tuner import engines

    return engines.get(name)


#: Launchers with a server that may still run; stopped at interpreter exit.
_RUNNING: set[Launcher] = set()


@atexit.register
def _stop_all() -> None:
    for launcher in list(_RUNNING):
        try:
            launcher.stop()
        except Exception as exc:  # stop() should not raise; never block exit on it
            logger.warning(f"stopping {launcher.trial_label or launcher.backend} at exit failed: {exc}")
