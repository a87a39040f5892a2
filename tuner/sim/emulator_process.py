"""The emulator as a child process on a loopback port, for tests and benchmarks.

:class:`EmulatorProcess` runs ``python -m tuner.sim.server`` in its own process group,
waits for ``/health``, and stops the group (SIGTERM, then SIGKILL) when done.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from tuner.net import free_port


class EmulatorProcess:
    """The emulator as a child process in its own process group, on a loopback port.

    For tests and benchmarks: ``with EmulatorProcess(["--tp-size", "8"], speedup=50) as emu:
    ... emu.url ...``. The log (stdout and stderr) goes to a temporary file, read with
    :meth:`log`; :meth:`stop` sends SIGTERM to the group, then SIGKILL if it lingers.
    """

    def __init__(
        self,
        sglang_flags: Sequence[str] = (),
        *,
        options: Sequence[str] = (),
        speedup: float = 1.0,
        port: int | None = None,
        host: str = "127.0.0.1",
        env: dict[str, str] | None = None,
    ):
        self.host = host
        self.port = port or free_port(host)
        self.argv = [
            sys.executable,
            "-m",
            "tuner.sim.server",
            "--speedup",
            str(speedup),
            *options,
            "--",
            *sglang_flags,
            "--host",
            host,
            "--port",
            str(self.port),
        ]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._final_log = ""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmulatorProcess:
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        return self

    def log(self) -> str:
        """Everything the process wrote so far (kept after :meth:`__exit__`)."""
        if self._log is None or self._log.closed:
            return self._final_log
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait for ``/health`` to answer 200; raises RuntimeError (with the log) if the
        process exits or the time runs out."""
        import httpx

        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"emulator exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"emulator not healthy after {timeout_s} s:\n{self.log()}")

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``timeout_s``; returns the exit status.
        The log stays readable with :meth:`log`."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._log is not None and not self._log.closed:
            self._final_log = self.log()
            self._log.close()
        return proc.returncode

    def __enter__(self) -> EmulatorProcess:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
