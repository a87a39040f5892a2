"""The ssh transport: commands, files, port checks and port forwards on another host,
through the system ``ssh``.

Using the ``ssh`` binary (not a Python SSH library) means the user's ``~/.ssh/config``
(host aliases, ``ProxyJump`` jump hosts, identity files, agents, certificates) works
as it does in their shell. Every call is an argv list; everything that reaches the
remote shell is quoted with :func:`shlex.quote` and run by ``sh -c``, so the remote
login shell (bash, zsh, fish...) does not matter. The ``ssh`` and ``systemd``
launchers reach their hosts through it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from loguru import logger

from tuner.failures import LaunchFailure
from tuner.net import connect_host, free_port

#: ssh's own exit status for connection and authentication errors.
SSH_ERROR = 255
#: How long a command keeps retrying a host it has reached before and that now refuses
#: or drops connections: an sshd restarted by a package upgrade is back within seconds, a
#: rebooting host within a few minutes, a network blip within seconds. Past it, the
#: command fails as ``unreachable`` (the trial is queued again, see :mod:`tuner.budget`).
RECONNECT_S = 120.0
#: First pause between reconnection attempts, doubled each time up to
#: :data:`RECONNECT_PAUSE_MAX_S`.
RECONNECT_PAUSE_S = 0.5
RECONNECT_PAUSE_MAX_S = 8.0
#: ssh's wording of connection failures that end by themselves (a listener restarting, a
#: connection cut); authentication, host-key and name errors are not among them: they need
#: a person.
_TRANSIENT = re.compile(
    r"Connection refused|Connection reset|Connection closed|closed by remote host|Connection timed out"
    r"|timed out|Broken pipe|kex_exchange_identification|No route to host|Network is unreachable"
    r"|Connection aborted|banner exchange",
    re.IGNORECASE,
)


def last_line(text: bytes | str, limit: int = 300) -> str:
    """The last non-empty line of a command's output (for messages), shortened."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = [line for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _default_control_dir() -> Path:
    # Unix socket paths are limited to ~104 bytes: keep the directory short.
    return Path(tempfile.gettempdir()) / f"tuner-ssh-{os.getuid()}"


@dataclass
class SshTransport:
    """How to reach one host with the system ``ssh`` client.

    ``host`` is anything ``ssh`` accepts (an alias from ``~/.ssh/config``, ``user@host``).
    The other fields are passed as command-line options and so override the user's
    config: ``BatchMode=yes`` (never prompt: the tuner runs unattended),
    ``ConnectTimeout``, and connection sharing (``ControlMaster=auto``, ``ControlPath``,
    ``ControlPersist``) so that the many short commands of a study reuse one
    authenticated connection instead of paying a handshake each.
    """

    host: str
    port: int | None = None
    user: str | None = None
    config_file: Path | None = None
    identity_file: Path | None = None
    connect_timeout_s: int = 10
    control_dir: Path | None = None
    control_persist: str = "10m"
    #: Extra ``-o`` options, e.g. ``["ServerAliveInterval=15"]``.
    options: Sequence[str] = field(default_factory=tuple)
    ssh_binary: str = "ssh"
    #: Seconds a command retries a host that answered before (:data:`RECONNECT_S`).
    reconnect_s: float = RECONNECT_S
    #: Whether a command has reached the host: only then is a refused connection a host
    #: coming back (retried); before, it is a wrong address or port (failed at once).
    reached: bool = field(default=False, init=False, compare=False)

    def ssh_argv(self, *, multiplex: bool = True) -> list[str]:
        """``ssh`` and its options, without the destination and command."""
        argv = [self.ssh_binary, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(self.connect_timeout_s)}"]
        if self.config_file is not None:
            argv += ["-F", str(self.config_file)]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.user is not None:
            argv += ["-l", self.user]
        if self.identity_file is not None:
            argv += ["-i", str(self.identity_file)]
        if multiplex:
            control_dir = self.control_dir or _default_control_dir()
            control_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            argv += [
                "-o",
                "ControlMaster=auto",
                "-o",
                f"ControlPath={control_dir}/%C",
                "-o",
                f"ControlPersist={self.control_persist}",
            ]
        else:
            argv += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        for option in self.options:
            argv += ["-o", option]
        return argv

    def command_argv(self, script: str) -> list[str]:
        """The argv that runs the POSIX shell ``script`` on the host."""
        return [*self.ssh_argv(), "--", self.host, "sh -c " + shlex.quote(script)]

    def run(
        self, script: str, *, input: bytes | None = None, timeout_s: float | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``script`` with ``sh -c`` on the host and return the finished process.

        Raises ``LaunchFailure("unreachable")`` when ssh itself fails (exit status 255:
        no route, refused, authentication) or does not finish within ``timeout_s``
        (default: connect timeout + 60 s). A host reached before that refuses or drops
        the connection is tried again for :attr:`reconnect_s` (an sshd restarting), so
        every script run here must be safe to run twice (they are: each one stops what
        it replaces). The script's own exit status is returned, not raised; scripts must
        not use 255.
        """
        timeout_s = timeout_s if timeout_s is not None else self.connect_timeout_s + 60
        deadline = time.monotonic() + self.reconnect_s
        pause = RECONNECT_PAUSE_S
        warned = False
        while True:
            try:
                done = subprocess.run(
                    self.command_argv(script),
                    input=input if input is not None else b"",
                    capture_output=True,
                    timeout=timeout_s,
                )
            except subprocess.TimeoutExpired:
                no_answer = f"ssh {self.host}: no answer within {timeout_s:g} s"
                raise LaunchFailure("unreachable", no_answer) from None
            except OSError as exc:
                raise LaunchFailure("unreachable", f"cannot run {self.ssh_binary}: {exc}") from exc
            if done.returncode != SSH_ERROR:
                self.reached = True
                return done
            reason = last_line(done.stderr) or "connection failed"
            if not (self.reached and _TRANSIENT.search(reason)) or time.monotonic() + pause > deadline:
                raise LaunchFailure("unreachable", f"ssh {self.host}: {reason}")
            if not warned:
                logger.warning(
                    f"ssh {self.host}: {reason}; retrying for up to {self.reconnect_s:.0f} s "
                    "(the host answered before)"
                )
                warned = True
            time.sleep(pause)
            pause = min(pause * 2, RECONNECT_PAUSE_MAX_S)

    def which(self, program: str) -> str | None:
        """The absolute path of ``program`` on the host's PATH (a login's PATH), if found."""
        done = self.run(f"command -v {shlex.quote(program)}", timeout_s=self.connect_timeout_s + 30)
        path = done.stdout.decode(errors="replace").strip().splitlines()
        return path[0] if done.returncode == 0 and path and path[0].startswith("/") else None

    def run_argv(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout_s: float | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Run a command given as an argv list on the host (each word quoted)."""
        return self.run(shlex.join(argv), input=input, timeout_s=timeout_s)

    def write_file(self, path: str, data: bytes, *, sudo: Sequence[str] = ()) -> None:
        """Write ``data`` to ``path`` on the host atomically (temp file, then rename)."""
        tmp = f"{path}.tmp-{os.getpid()}"
        prefix = shlex.join(sudo) + " " if sudo else ""
        script = (
            f"{prefix}mkdir -p -- {shlex.quote(os.path.dirname(path) or '.')} && "
            f"{prefix}sh -c 'cat > \"$1\"' sh {shlex.quote(tmp)} && "
            f"{prefix}mv -f -- {shlex.quote(tmp)} {shlex.quote(path)}"
        )
        done = self.run(script, input=data)
        if done.returncode != 0:
            raise LaunchFailure("crash", f"cannot write {path} on {self.host}: {last_line(done.stderr)}")

    def port_in_use(self, host: str, port: int) -> bool:
        """Whether a socket on the remote host listens on ``port``.

        Read from the host's listening-socket table (``ss``, else ``netstat``); where
        neither exists, by connecting through ssh's own stdio forwarding
        (``ssh -W host:port``, made by the remote sshd, so no tool is needed there).
        """
        script = PORT_STATE_SH + f"port_state {int(port)}\n"
        answer = self.run(script).stdout.decode().strip()
        if answer in ("busy", "free"):
            return answer == "busy"
        return self._port_connects(host, port)

    def _port_connects(self, host: str, port: int, settle_s: float = 3.0) -> bool:
        argv = [*self.ssh_argv(), "-W", f"{connect_host(host)}:{port}", "--", self.host]
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            _, err = proc.communicate(timeout=settle_s)
        except subprocess.TimeoutExpired:
            proc.kill()  # connected, and the peer keeps the connection open
            proc.communicate()
            return True
        if proc.returncode == 0:
            return True
        text = err.decode("utf-8", errors="replace")
        if re.search(r"open failed|refused by peer|forwarding failed|forwarding request failed", text):
            return False
        if proc.returncode == SSH_ERROR:
            raise LaunchFailure("unreachable", f"ssh {self.host}: {last_line(text) or 'connection failed'}")
        return False

    def open_tunnel(self, remote_host: str, remote_port: int) -> SshTunnel:
        """A local port forward to ``remote_host:remote_port`` as seen from the host."""
        tunnel = SshTunnel(self, remote_host, remote_port)
        tunnel.open()
        return tunnel

    def close(self) -> None:
        """Retire the shared connection (the ``ControlPersist`` master), if one runs:
        ``-O stop`` lets sessions in flight (another worker's) finish, then it exits."""
        argv = [*self.ssh_argv(), "-O", "stop", "--", self.host]
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            logger.warning(f"closing the ssh connection to {self.host} failed: {exc}")


class SshTunnel:
    """An ssh local port forward: ``127.0.0.1:<local port>`` here -> ``host:port`` there.

    Why a forward rather than ``ssh host curl .../health`` per probe: the load generator
    needs a route to the server anyway (a server bound to the remote loopback is not
    reachable otherwise), and a health probe through that same route tests exactly what
    the measurement will use. It needs no ``curl`` on the remote host, and the health
    check is the same HTTP client code as the local backend. The forward runs in its own
    ``ssh`` process (no connection sharing: it lives and dies with that process, which
    this object owns and stops); if it dies (network blip) :meth:`ensure` reopens it on
    the same local port, so ``base_url`` stays valid.
    """

    def __init__(self, transport: SshTransport, remote_host: str, remote_port: int):
        self.transport = transport
        self.remote_host = remote_host
        self.remote_port = remote_port
        self.local_port = 0
        self.proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None

    def open(self, attempts: int = 3) -> None:
        """Start the forward and wait until it accepts local connections."""
        last_error = ""
        for _ in range(attempts):
            port = self.local_port or free_port()
            if self._start(port):
                self.local_port = port
                return
            last_error = self._error_text()
            self.close()
            if re.search(
                r"Could not resolve|Connection refused|timed out|Permission denied|No route", last_error
            ):
                break
        raise LaunchFailure(
            "unreachable", f"ssh port forward to {self.transport.host} failed: {last_line(last_error)}"
        )

    def _start(self, port: int) -> bool:
        forward = f"127.0.0.1:{port}:{self.remote_host}:{self.remote_port}"
        argv = [
            *self.transport.ssh_argv(multiplex=False),
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            forward,
            "--",
            self.transport.host,
        ]
        # stderr to a file: every refused forwarded connection (server still starting)
        # logs a line, which would fill a pipe that nobody reads.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.transport.connect_timeout_s + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.05)
        return False

    def _error_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", errors="replace")

    def alive(self) -> bool:
        """Whether the forwarding ssh process still runs."""
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> None:
        """Reopen the forward (same local port) if its ssh process has died."""
        if not self.alive():
            self.close()
            self.open()

    def close(self) -> None:
        """Stop the forwarding ssh process. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=5)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


#: Shell function: ``port_state PORT`` prints busy, free, or unknown (no ss or netstat).
PORT_STATE_SH = """
port_state() {
  if command -v ss >/dev/null 2>&1; then
    if ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; then echo busy; else echo free; fi
  elif command -v netstat >/dev/null 2>&1; then
    if netstat -ltn 2>/dev/null | awk '{print $4}' | grep -Eq "[:.]$1\\$"; then echo busy; else echo free; fi
  else
    echo unknown
  fi
}
"""
