"""The ``ssh`` backend: the server on another host, driven through the system ``ssh``.

Using the ``ssh`` binary (not a Python SSH library) means the user's ``~/.ssh/config``
(host aliases, ``ProxyJump`` jump hosts, identity files, agents, certificates) works
as it does in their shell. Every call is an argv list; everything that reaches the
remote shell is quoted with :func:`shlex.quote` and run by ``sh -c``, so the remote
login shell (bash, zsh, fish...) does not matter.

Remote layout (paths relative to the remote home directory unless absolute), in
``remote_dir`` (default ``.cache/tuner``):

* ``tuner-<port>.pid``: the process group of the server listening on ``<port>``. One
  pid file per port, because the port is what a leftover server blocks: a server left
  running by an earlier, killed tuner run is found and stopped before the next start.
* ``tuner-<port>.status``: the exit status, written by the wrapper shell when the
  server ends by itself.
* ``<trial label>.log``: the server's output, fetched incrementally (``tail -c +N``)
  into the trial's local log file.

Health and measurement go through an ssh local port forward (``-L``), see
:class:`SshTunnel` for why.
"""

from __future__ import annotations

import contextlib
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
from typing import TYPE_CHECKING, Any

from loguru import logger

from tuner.failures import LaunchFailure
from tuner.launchers.base import (
    Launcher,
    connect_host,
    free_local_port,
    http_url,
    read_tail,
    server_endpoint,
)
from tuner.launchers.classify import signal_from_shell_status

if TYPE_CHECKING:
    from tuner.engines.base import Engine, LaunchSpec

#: ssh's own exit status for connection and authentication errors.
SSH_ERROR = 255


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
                "-o", "ControlMaster=auto",
                "-o", f"ControlPath={control_dir}/%C",
                "-o", f"ControlPersist={self.control_persist}",
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
        (default: connect timeout + 60 s). The script's own exit status is returned,
        not raised; scripts must not use 255.
        """
        timeout_s = timeout_s if timeout_s is not None else self.connect_timeout_s + 60
        try:
            done = subprocess.run(
                self.command_argv(script),
                input=input if input is not None else b"",
                capture_output=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise LaunchFailure("unreachable", f"ssh {self.host}: no answer within {timeout_s:g} s") from None
        except OSError as exc:
            raise LaunchFailure("unreachable", f"cannot run {self.ssh_binary}: {exc}") from exc
        if done.returncode == SSH_ERROR:
            reason = last_line(done.stderr) or "connection failed"
            raise LaunchFailure("unreachable", f"ssh {self.host}: {reason}")
        return done

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
        script = _PORT_STATE + f"port_state {int(port)}\n"
        answer = self.run(script).stdout.decode().strip()
        if answer in ("busy", "free"):
            return answer == "busy"
        return self._port_connects(host, port)

    def _port_connects(self, host: str, port: int, settle_s: float = 3.0) -> bool:
        argv = [*self.ssh_argv(), "-W", f"{connect_host(host)}:{port}", "--", self.host]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
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
        self._stderr = None

    def open(self, attempts: int = 3) -> None:
        """Start the forward and wait until it accepts local connections."""
        last_error = ""
        for _ in range(attempts):
            port = self.local_port or free_local_port()
            if self._start(port):
                self.local_port = port
                return
            last_error = self._error_text()
            self.close()
            if re.search(r"Could not resolve|Connection refused|timed out|Permission denied|No route",
                         last_error):
                break
        raise LaunchFailure("unreachable",
                            f"ssh port forward to {self.transport.host} failed: {last_line(last_error)}")

    def _start(self, port: int) -> bool:
        forward = f"127.0.0.1:{port}:{self.remote_host}:{self.remote_port}"
        argv = [
            *self.transport.ssh_argv(multiplex=False),
            "-N", "-o", "ExitOnForwardFailure=yes", "-L", forward, "--", self.transport.host,
        ]
        # stderr to a file: every refused forwarded connection (server still starting)
        # logs a line, which would fill a pipe that nobody reads.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._stderr, start_new_session=True)
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


#: Shell functions. ``group_alive PGID``: does the process group have a member that is
#: not a zombie? (A wrapper orphaned under an init that does not reap, as in some
#: containers, stays a zombie.) Without ``ps``, ``kill -0`` (zombies count).
#: ``cmdline PID``: the command line of a process.
_GROUP_ALIVE = """
group_alive() {
  if command -v ps >/dev/null 2>&1; then
    ps -A -o pgid= -o stat= 2>/dev/null |
      awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
  else
    kill -0 "-$1" 2>/dev/null
  fi
}
cmdline() {
  if [ -r "/proc/$1/cmdline" ]; then tr '\\000' ' ' < "/proc/$1/cmdline"
  else ps -o args= -p "$1" 2>/dev/null
  fi
}
"""


#: Shell function: ``port_state PORT`` prints busy, free, or unknown (no ss or netstat).
_PORT_STATE = """
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


def _safe_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", label) or "server"


class SshLauncher(Launcher):
    """The launch command on a remote host, in its own session, owned by a pid file.

    ``start`` stops a leftover server of an earlier run on the same port (pid file
    present and its process group alive), checks the port, and starts
    ``setsid sh -c '<wrapper>'`` in the background: the wrapper records its pid (the
    session and process group id) in the pid file, runs the server with ``spec.env``
    and its output in the remote log, and records the exit status. ``stop`` sends
    SIGTERM to the process group, waits ``stop_grace_s``, then SIGKILL, all in one ssh
    command on the remote side. Needs on the remote host: a POSIX ``sh``, ``setsid``
    (util-linux), ``tail``, ``awk``; uses ``ps`` (procps) and ``ss`` (iproute2) where
    present; and ``AllowTcpForwarding`` in its sshd (the default).
    """

    backend = "ssh"

    def __init__(
        self,
        transport: SshTransport | str,
        engine: Engine | None = None,
        *,
        remote_dir: str = ".cache/tuner",
        unreachable_after: int = 3,
        **options: Any,
    ):
        """``transport``: an :class:`SshTransport` or a destination for ``ssh``.
        ``remote_dir``: where pid, status and log files live on the host.
        ``unreachable_after``: consecutive failed status probes before the host counts
        as unreachable. Other options: see :class:`Launcher`."""
        super().__init__(engine, **options)
        self.transport = transport if isinstance(transport, SshTransport) else SshTransport(transport)
        self.remote_dir = remote_dir.rstrip("/") or "."
        self.unreachable_after = unreachable_after
        self.tunnel: SshTunnel | None = None
        self._returncode: int | None = None
        self._exited = False
        self._log_offset = 0
        self._probe_failures = 0
        self._pid_file = self._status_file = self._remote_log = ""
        self._bind_host = "127.0.0.1"
        self._port = 0
        #: the remote server's process group (the wrapper's pid), while one runs
        self.pgid: int | None = None

    # -- remote scripts ------------------------------------------------------------

    def _paths(self, port: int, trial_label: str) -> None:
        slot = f"tuner-{port}"
        self._marker = f"tuner-slot={slot}"
        self._pid_file = f"{self.remote_dir}/{slot}.pid"
        self._status_file = f"{self.remote_dir}/{slot}.status"
        self._remote_log = f"{self.remote_dir}/{_safe_name(trial_label)}.log"

    def _functions(self) -> str:
        """Shell functions shared by the remote scripts."""
        q = shlex.quote
        grace_ticks = max(1, int(self.stop_grace_s * 10))
        # stop_server: a pid from the file may have been reused by an unrelated process
        # (after a reboot): only a live leader whose command line carries our marker is
        # ours; a dead leader with live group members (orphaned workers) is ours too.
        return _GROUP_ALIVE + _PORT_STATE + f"""
stop_server() {{
  pidfile={q(self._pid_file)}
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  case "$pid" in ''|*[!0-9]*) rm -f "$pidfile"; return 0;; esac
  [ -z "$1" ] || [ "$1" = "$pid" ] || return 0  # another launcher's server now
  if kill -0 "$pid" 2>/dev/null; then
    cmdline "$pid" | grep -F -q -- {q(self._marker)} || {{ rm -f "$pidfile"; return 0; }}
  fi
  if group_alive "$pid"; then
    kill -TERM "-$pid" 2>/dev/null
    i=0
    while group_alive "$pid" && [ "$i" -lt {grace_ticks} ]; do sleep 0.1; i=$((i+1)); done
    kill -KILL "-$pid" 2>/dev/null
    i=0
    while group_alive "$pid" && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i+1)); done
    echo "stopped process group $pid" >&2
  fi
  rm -f "$pidfile"
}}
probe() {{
  if [ -s {q(self._status_file)} ]; then echo "exited $(cat {q(self._status_file)})"
  elif [ -s {q(self._pid_file)} ] && group_alive "$(cat {q(self._pid_file)})"; then echo alive
  elif [ -s {q(self._status_file)} ]; then echo "exited $(cat {q(self._status_file)})"  # exited just now
  else echo gone
  fi
  tail -c +$1 {q(self._remote_log)} 2>/dev/null
  return 0
}}
"""

    def _start_script(self, spec: LaunchSpec, port: int, *, port_checked: bool) -> str:
        """Stop a leftover server, check the port, launch; prints ``port busy|unknown``
        (nothing launched) or ``pid N``."""
        q = shlex.quote
        env_words = " ".join(q(f"{k}={v}") for k, v in spec.env.items())
        command = ("env " + env_words + " " if env_words else "") + shlex.join(spec.argv)
        # The wrapper: a TERM/INT/HUP handler (not an ignore: ignored signals would be
        # inherited by the server) keeps the shell alive until the server has gone, so
        # the exit status is recorded however the server ended.
        wrapper = (
            f": {q(self._marker)}; trap : TERM INT HUP; echo $$ > {q(self._pid_file)}; "
            f"{command} > {q(self._remote_log)} 2>&1 < /dev/null; "
            f"echo $? > {q(self._status_file)}.tmp; mv -f {q(self._status_file)}.tmp {q(self._status_file)}"
        )
        check = "" if port_checked else f"""
state=$(port_state {port})
if [ "$state" != free ]; then echo "port $state"; exit 0; fi"""
        return self._functions() + f"""
mkdir -p -- {q(self.remote_dir)} || exit 1
stop_server{check}
rm -f {q(self._status_file)} {q(self._pid_file)}
: > {q(self._remote_log)} || exit 1
setsid sh -c {q(wrapper)} > /dev/null 2>&1 < /dev/null &
i=0
while [ ! -s {q(self._pid_file)} ] && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i+1)); done
echo "pid $(cat {q(self._pid_file)} 2>/dev/null)"
"""

    def _probe_script(self) -> str:
        return self._functions() + f"probe {self._log_offset + 1}\n"

    def _stop_script(self) -> str:
        return self._functions() + f"stop_server {self.pgid or ''}\nprobe {self._log_offset + 1}\n"

    # -- the interface -------------------------------------------------------------

    def start(self, spec: LaunchSpec, *, log_path: Path, trial_label: str) -> None:
        self._begin(spec, log_path, trial_label)
        bind_host, port = server_endpoint(spec.argv, getattr(self._engine(), "default_port", 30000))
        self._bind_host, self._port = bind_host, port
        self._paths(port, trial_label)
        self._returncode, self._exited, self._log_offset, self._probe_failures = None, False, 0, 0
        self.pgid = None
        self.log_path.write_bytes(b"")
        timeout_s = self.stop_grace_s + self.transport.connect_timeout_s + 30
        done = self.transport.run(self._start_script(spec, port, port_checked=False), timeout_s=timeout_s)
        answer = done.stdout.decode("utf-8", errors="replace").split()
        if answer[:2] == ["port", "unknown"]:  # no ss/netstat there: try to connect instead
            if not self.transport._port_connects(bind_host, port):
                done = self.transport.run(self._start_script(spec, port, port_checked=True),
                                          timeout_s=timeout_s)
                answer = done.stdout.decode("utf-8", errors="replace").split()
            else:
                answer = ["port", "busy"]
        if answer[:2] == ["port", "busy"]:
            raise LaunchFailure("port-busy", f"port {port} on {self.transport.host} is already in use; "
                                "nothing launched")
        if done.stderr.strip():
            logger.info(f"{self.transport.host}: {last_line(done.stderr)}")
        if len(answer) != 2 or answer[0] != "pid" or not answer[1].isdigit():
            raise LaunchFailure("crash", f"could not start the server on {self.transport.host}: "
                                f"{last_line(done.stderr) or 'no pid file written'}")
        self.pgid = int(answer[1])
        self._owned = True
        self._launched()
        try:
            self.tunnel = self.transport.open_tunnel(connect_host(bind_host), port)
        except BaseException:
            self.stop()
            raise

    def base_url(self) -> str:
        if self.tunnel is None:
            raise RuntimeError("base_url() before start()")
        return http_url("127.0.0.1", self.tunnel.local_port)

    def alive(self) -> bool:
        """Whether the remote server still runs (one ssh round trip, which also fetches
        new log output). Raises ``LaunchFailure("unreachable")`` after
        ``unreachable_after`` consecutive failed probes."""
        if not self._owned or self._exited:
            return False
        self._fetch()
        if not self._exited and self.tunnel is not None:
            try:
                self.tunnel.ensure()
            except LaunchFailure as exc:
                logger.warning(f"{self.trial_label}: {exc}")
        return not self._exited

    def log_tail(self, lines: int = 80) -> str:
        if self._owned:
            with contextlib.suppress(LaunchFailure):
                self._fetch()
        return read_tail(self.log_path, lines) if self.log_path else ""

    def classify_exit(self) -> LaunchFailure:
        if self._owned and not self._exited:
            try:
                self._fetch()
            except LaunchFailure as exc:
                return exc
            if not self._exited:
                return LaunchFailure("crash", f"{self.trial_label}: server still running on "
                                     f"{self.transport.host}")
        return self._classify(self._returncode, read_tail(self.log_path, 10**6) if self.log_path else "")

    def stop(self) -> None:
        if not self._release():
            return
        try:
            done = self.transport.run(self._stop_script(),
                                      timeout_s=self.stop_grace_s + self.transport.connect_timeout_s + 30)
        except Exception as exc:  # stop() never raises
            logger.warning(f"stopping {self.trial_label} on {self.transport.host} failed: {exc}; "
                           "the next start on this port stops it through the pid file")
            return
        self._apply_probe(done.stdout)

    def close(self) -> None:
        """Stop the server and end the shared ssh connection."""
        self.stop()
        self.transport.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------

    def _fetch(self) -> None:
        """One round trip: the server's state and its new log output."""
        try:
            done = self.transport.run(self._probe_script(), timeout_s=self.transport.connect_timeout_s + 30)
        except LaunchFailure:
            self._probe_failures += 1
            if self._probe_failures >= self.unreachable_after:
                raise
            return
        self._probe_failures = 0
        self._apply_probe(done.stdout)

    def _apply_probe(self, stdout: bytes) -> None:
        """Parse ``probe`` output: a state line, then new log bytes (appended locally)."""
        head, _, data = stdout.partition(b"\n")
        if data and self.log_path is not None:
            with self.log_path.open("ab") as fh:
                fh.write(data)
            self._log_offset += len(data)
        words = head.decode("utf-8", errors="replace").split()
        if not words or words[0] not in ("exited", "gone"):
            return
        self._exited = True
        if words[0] == "exited" and len(words) > 1 and words[1].lstrip("-").isdigit():
            self._returncode = signal_from_shell_status(int(words[1]))
