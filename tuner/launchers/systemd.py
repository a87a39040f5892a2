"""The ``systemd`` backend: every trial as a systemd unit, the way production runs it.

The trial's unit (the same renderer as ``tuner best``'s output, so the unit that wins
is the unit that was measured) is written to ``<unit_dir>/<unit>.service``, then
``systemctl daemon-reload`` and ``systemctl restart <unit>``; health is polled over
HTTP, state read with ``systemctl show``, logs with ``journalctl -u <unit>``, and
``systemctl stop <unit>`` ends the trial (systemd stops the unit's whole cgroup).

Locally the commands run directly; with ``ssh=...`` they run on that host through
:class:`~tuner.transports.ssh.SshTransport`, and health goes through an ssh port
forward like the ``ssh`` backend's. ``sudo`` (e.g. ``("sudo", "-n")``) prefixes every
command that needs root when the login user is not root.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from tuner.errors import UsageError
from tuner.failures import LaunchFailure
from tuner.launchers.base import Launcher, bind_address, read_tail
from tuner.net import connect_host, http_url, local_port_in_use
from tuner.transports.ssh import SshTransport, SshTunnel, last_line

if TYPE_CHECKING:
    from tuner.engines.base import Engine, LaunchSpec

DEFAULT_UNIT_DIR = "/etc/systemd/system"

#: ``systemctl show`` properties read for the unit's state.
_PROPERTIES = ("ActiveState", "SubState", "Result", "ExecMainCode", "ExecMainStatus", "MainPID")

#: ``ExecMainCode`` values (``siginfo_t.si_code`` of the main process's exit).
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = 1, 2, 3


class SystemdLauncher(Launcher):
    """One systemd unit per trial, on this host or over ssh."""

    backend = "systemd"

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        ssh: SshTransport | str | None = None,
        unit_name: str | None = None,
        unit_dir: str = DEFAULT_UNIT_DIR,
        sudo: Sequence[str] = (),
        unit_options: dict[str, Any] | None = None,
        systemctl: str = "systemctl",
        journalctl: str = "journalctl",
        log_lines: int = 20000,
        command_timeout_s: float = 120.0,
        **options: Any,
    ):
        """``unit_name``: the unit (default ``tuner-<port>``); ``unit_dir``: where its file
        is written; ``unit_options``: extra keywords for
        :func:`tuner.systemd_unit.render_systemd_unit` (``user``, ``working_directory``,
        ``environment_file``, ``python``: the interpreter path on the unit's host when
        ``argv[0]`` is ``python3``...; trials default to ``restart="no"``); ``log_lines``:
        how many journal lines are fetched into the trial log. Other options: see :class:`Launcher`."""
        super().__init__(engine, **options)
        self.transport = SshTransport(ssh) if isinstance(ssh, str) else ssh
        self.unit_name = unit_name
        self.unit_dir = unit_dir
        self.sudo = tuple(sudo)
        self.unit_options = dict(unit_options or {})
        self.systemctl = systemctl
        self.journalctl = journalctl
        self.log_lines = log_lines
        self.command_timeout_s = command_timeout_s
        self.tunnel: SshTunnel | None = None
        self.unit = ""
        self.unit_path = ""
        self._since = 0
        self._host = "127.0.0.1"
        self._port = 0
        self._state: dict[str, str] = {}

    # -- host commands ----------------------------------------------------------

    @property
    def where(self) -> str:
        """The host the unit runs on, for messages."""
        return self.transport.host if self.transport is not None else "localhost"

    def _run(
        self,
        argv: Sequence[str],
        *,
        root: bool = True,
        timeout_s: float | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        argv = [*(self.sudo if root else ()), *argv]
        timeout_s = timeout_s or self.command_timeout_s
        if self.transport is not None:
            return self.transport.run_argv(argv, timeout_s=timeout_s)
        try:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s)
        except FileNotFoundError as exc:
            raise UsageError(f"cannot run {argv[0]!r}: {exc.strerror}") from exc
        except subprocess.TimeoutExpired:
            raise LaunchFailure(
                "timeout", f"{shlex.join(argv)} did not finish within {timeout_s:g} s"
            ) from None

    def _systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        done = self._run([self.systemctl, *args])
        if check and done.returncode != 0:
            raise LaunchFailure(
                "crash",
                f"systemctl {' '.join(args)} on {self.where} failed: "
                f"{last_line(done.stderr) or f'exit status {done.returncode}'}",
            )
        return done

    def _write_unit(self, text: str) -> None:
        data = text.encode()
        if self.transport is not None:
            self.transport.write_file(self.unit_path, data, sudo=self.sudo)
            return
        if self.sudo:
            tmp = f"{self.unit_path}.tmp-{os.getpid()}"
            steps = (([*self.sudo, "tee", tmp], data), ([*self.sudo, "mv", "-f", tmp, self.unit_path], b""))
            for argv, stdin in steps:
                done = subprocess.run(argv, input=stdin, capture_output=True, timeout=self.command_timeout_s)
                if done.returncode != 0:
                    raise LaunchFailure("crash", f"cannot write {self.unit_path}: {last_line(done.stderr)}")
            return
        path = Path(self.unit_path)
        tmp_path = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            tmp_path.write_bytes(data)
            tmp_path.replace(path)
        except OSError as exc:
            raise UsageError(f"cannot write the unit file {path}: {exc.strerror or exc}") from exc

    def _host_time(self) -> int:
        """The unit host's clock (seconds), so journal windows do not depend on clock skew."""
        if self.transport is None:
            return int(time.time())
        done = self._run(["date", "+%s"], root=False)
        try:
            return int(done.stdout.decode().strip())
        except ValueError:
            return int(time.time())

    def render_unit(self, spec: LaunchSpec) -> str:
        """The unit file text for ``spec`` (:func:`tuner.systemd_unit.render_systemd_unit`)."""
        from tuner.systemd_unit import render_systemd_unit

        # Restart=no: a trial that fails must fail once, visibly, not loop on restarts.
        options = {
            "description": f"tuner {self.trial_label}: {spec.engine} server",
            "restart": "no",
            **self.unit_options,
        }
        if not options.get("python") and self.transport is not None:
            # The unit runs on the remote host: its interpreter, never this machine's.
            from tuner.deployment import ENV_PYTHON

            options["python"] = self.interpreter() or ENV_PYTHON
        return render_systemd_unit(spec, **options)

    # -- the interface -------------------------------------------------------------

    def start(self, spec: LaunchSpec, *, log_path: Path, trial_label: str) -> None:
        log_file = self._begin(spec, log_path, trial_label)
        bind_host, port = bind_address(spec)
        self._host, self._port = connect_host(bind_host), port
        self.unit = f"{self.unit_name or f'tuner-{port}'}.service"
        self.unit_path = f"{self.unit_dir.rstrip('/')}/{self.unit}"
        self._state = {}
        log_file.write_bytes(b"")
        text = self.render_unit(spec)
        # A unit of the same name left running (a killed tuner run) holds the port: stop it.
        self._systemctl("stop", self.unit, check=False)
        busy = (
            self.transport.port_in_use(bind_host, port)
            if self.transport is not None
            else local_port_in_use(bind_host, port)
        )
        if busy:
            raise LaunchFailure(
                "port-busy", f"port {port} on {self.where} is already in use; nothing launched"
            )
        self._write_unit(text)
        self._systemctl("daemon-reload")
        self._systemctl("reset-failed", self.unit, check=False)
        self._since = self._host_time()
        self._owned = True
        self._launched()
        try:
            done = self._systemctl("restart", self.unit, check=False)
            if done.returncode != 0:
                self._refresh_state()
                self._fetch_log()
                failure = self.classify_exit()
                raise LaunchFailure(
                    failure.reason,
                    f"systemctl restart {self.unit}: {last_line(done.stderr)}; {failure.message}",
                )
            if self.transport is not None:
                self.tunnel = self.transport.open_tunnel(self._host, port)
        except BaseException:
            self.stop()
            raise

    def base_url(self) -> str:
        if self.tunnel is not None:
            return http_url("127.0.0.1", self.tunnel.local_port)
        return http_url(self._host, self._port)

    def alive(self) -> bool:
        if not self._owned:
            return False
        state = self._refresh_state()
        active = state.get("ActiveState", "")
        restarting = active == "activating" and state.get("SubState") == "auto-restart"
        if active in ("active", "reloading", "activating") and not restarting:
            if self.tunnel is not None:
                try:
                    self.tunnel.ensure()
                except LaunchFailure as exc:
                    logger.warning(f"{self.trial_label}: {exc}")
            return True
        return False

    def log_tail(self, lines: int = 80) -> str:
        if self._owned:
            with contextlib.suppress(LaunchFailure):
                self._fetch_log()
        return read_tail(self.log_path, lines) if self.log_path else ""

    def _still_running(self) -> str | None:
        if self._owned:
            if self.alive():
                return f"{self.unit} still active on {self.where}"
            self._fetch_log()
        return None

    def stop(self) -> None:
        if not self._release():
            return
        try:
            done = self._run([self.systemctl, "stop", self.unit])
            if done.returncode != 0:
                logger.warning(f"systemctl stop {self.unit} on {self.where}: {last_line(done.stderr)}")
            self._refresh_state()
            self._fetch_log()
        except Exception as exc:  # stop() never raises
            logger.warning(f"stopping {self.unit} on {self.where} failed: {exc}")

    # -- internals -----------------------------------------------------------------

    def _refresh_state(self) -> dict[str, str]:
        args = ["show", self.unit, *(f"--property={p}" for p in _PROPERTIES)]
        done = self._systemctl(*args, check=False)
        state = {}
        for line in done.stdout.decode("utf-8", errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                state[key.strip()] = value.strip()
        self._state = state
        return state

    def _exit_status(self) -> int | None:
        try:
            code = int(self._state.get("ExecMainCode", "0"))
            status = int(self._state.get("ExecMainStatus", "0"))
        except ValueError:
            return None
        if code == _CLD_EXITED:
            return status
        if code in (_CLD_KILLED, _CLD_DUMPED):
            return -status
        return None

    def _fetch_log(self) -> None:
        """The unit's journal since this launch, into the trial's log file (verbatim
        messages, ``-o cat``, so log patterns see what the server printed)."""
        argv = [
            self.journalctl,
            "-u",
            self.unit,
            "--no-pager",
            "-n",
            str(self.log_lines),
            "--since",
            f"@{self._since}",
            "-o",
            "cat",
        ]
        done = self._run(argv)
        if done.returncode == 0 and self.log_path is not None:
            self.log_path.write_bytes(done.stdout)
