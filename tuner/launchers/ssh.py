"""The ``ssh`` backend: the server on another host, driven through the system ``ssh``.

Commands reach the host through :class:`~tuner.transports.ssh.SshTransport` (the system
``ssh``, so the user's ``~/.ssh/config`` applies); everything that reaches the remote
shell is quoted with :func:`shlex.quote`.

Remote layout (paths relative to the remote home directory unless absolute), in
``remote_dir`` (default ``.cache/tuner``):

* ``tuner-<port>.pid``: the process group of the server listening on ``<port>``. One
  pid file per port, because the port is what a leftover server blocks: a server left
  running by an earlier, killed tuner run is found and stopped before the next start.
* ``tuner-<port>.status``: the exit status, written by the wrapper shell when the
  server ends by itself.
* ``<study>-<trial label>.log``: the server's output, fetched incrementally
  (``tail -c +N``) into the trial's local log file. The study is the folder of that local
  file (``studies/<study>/``), so two studies on one host never write to one log.

Health and measurement go through an ssh local port forward (``-L``), see
:class:`~tuner.transports.ssh.SshTunnel` for why.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from tuner.failures import LaunchFailure
from tuner.launchers.base import Launcher, bind_address, read_tail
from tuner.launchers.classify import signal_from_shell_status
from tuner.net import connect_host, http_url
from tuner.transports.ssh import PORT_STATE_SH, SshTransport, SshTunnel, last_line

if TYPE_CHECKING:
    from tuner.engines.base import Engine, LaunchSpec

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
        self._serving = False
        self._route_lost: LaunchFailure | None = None

    # -- remote scripts ------------------------------------------------------------

    def _paths(self, port: int, trial_label: str, study: str) -> None:
        slot = f"tuner-{port}"
        self._marker = f"tuner-slot={slot}"
        self._pid_file = f"{self.remote_dir}/{slot}.pid"
        self._status_file = f"{self.remote_dir}/{slot}.status"
        self._remote_log = f"{self.remote_dir}/{_safe_name(study)}-{_safe_name(trial_label)}.log"

    def _functions(self) -> str:
        """Shell functions shared by the remote scripts."""
        q = shlex.quote
        grace_ticks = max(1, int(self.stop_grace_s * 10))
        # stop_server: a pid from the file may have been reused by an unrelated process
        # (after a reboot): only a live leader whose command line carries our marker is
        # ours; a dead leader with live group members (orphaned workers) is ours too.
        return (
            _GROUP_ALIVE
            + PORT_STATE_SH
            + f"""
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
        )

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
        check = (
            ""
            if port_checked
            else f"""
state=$(port_state {port})
if [ "$state" != free ]; then echo "port $state"; exit 0; fi"""
        )
        return (
            self._functions()
            + f"""
mkdir -p -- {q(self.remote_dir)} || exit 1
stop_server{check}
rm -f {q(self._status_file)} {q(self._pid_file)}
: > {q(self._remote_log)} || exit 1
setsid sh -c {q(wrapper)} > /dev/null 2>&1 < /dev/null &
i=0
while [ ! -s {q(self._pid_file)} ] && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i+1)); done
echo "pid $(cat {q(self._pid_file)} 2>/dev/null)"
"""
        )

    def _probe_script(self) -> str:
        return self._functions() + f"probe {self._log_offset + 1}\n"

    def _stop_script(self) -> str:
        return self._functions() + f"stop_server {self.pgid or ''}\nprobe {self._log_offset + 1}\n"

    # -- the interface -------------------------------------------------------------

    def start(self, spec: LaunchSpec, *, log_path: Path, trial_label: str) -> None:
        log_file = self._begin(spec, log_path, trial_label)
        bind_host, port = bind_address(spec)
        self._bind_host, self._port = bind_host, port
        self._paths(port, trial_label, log_path.parent.name)
        self._returncode, self._exited, self._log_offset, self._probe_failures = None, False, 0, 0
        self.pgid = None
        self._serving, self._route_lost = False, None
        log_file.write_bytes(b"")
        timeout_s = self.stop_grace_s + self.transport.connect_timeout_s + 30
        done = self.transport.run(self._start_script(spec, port, port_checked=False), timeout_s=timeout_s)
        answer = done.stdout.decode("utf-8", errors="replace").split()
        if answer[:2] == ["port", "unknown"]:  # no ss/netstat there: try to connect instead
            if not self.transport._port_connects(bind_host, port):
                done = self.transport.run(
                    self._start_script(spec, port, port_checked=True), timeout_s=timeout_s
                )
                answer = done.stdout.decode("utf-8", errors="replace").split()
            else:
                answer = ["port", "busy"]
        if answer[:2] == ["port", "busy"]:
            raise LaunchFailure(
                "port-busy", f"port {port} on {self.transport.host} is already in use; nothing launched"
            )
        if done.stderr.strip():
            logger.info(f"{self.transport.host}: {last_line(done.stderr)}")
        if len(answer) != 2 or answer[0] != "pid" or not answer[1].isdigit():
            raise LaunchFailure(
                "crash",
                f"could not start the server on {self.transport.host}: "
                f"{last_line(done.stderr) or 'no pid file written'}",
            )
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

    def wait_healthy(self, timeout_s: float, **kw: Any) -> float:
        seconds = super().wait_healthy(timeout_s, **kw)
        # From here on requests are measured: a forward that drops spoils them.
        self._serving = True
        return seconds

    def alive(self) -> bool:
        """Whether the remote server still runs (one ssh round trip, which also fetches
        new log output, and reopens the port forward if its connection dropped). Raises
        ``LaunchFailure("unreachable")`` after ``unreachable_after`` consecutive failed
        probes."""
        if not self._owned or self._exited:
            return False
        self._fetch()
        if not self._exited and self.tunnel is not None:
            if self._serving and not self.tunnel.alive() and self._route_lost is None:
                self._route_lost = LaunchFailure(
                    "unreachable",
                    f"{self.trial_label}: the ssh connection to {self.transport.host} dropped while the "
                    "server was measured (the server kept running); the requests in flight failed "
                    "for the host's reasons",
                )
                logger.warning(self._route_lost.message)
            try:
                self.tunnel.ensure()
            except LaunchFailure as exc:
                logger.warning(f"{self.trial_label}: {exc}")
        return not self._exited

    def route_lost(self) -> LaunchFailure | None:
        """The port forward's connection dropped after the server was healthy (see
        :meth:`Launcher.route_lost`); found by :meth:`alive`."""
        return self._route_lost

    def log_tail(self, lines: int = 80) -> str:
        if self._owned:
            with contextlib.suppress(LaunchFailure):
                self._fetch()
        return read_tail(self.log_path, lines) if self.log_path else ""

    def _still_running(self) -> str | None:
        if self._owned and not self._exited:
            self._fetch()
            if not self._exited:
                return f"server still running on {self.transport.host}"
        return None

    def _exit_status(self) -> int | None:
        return self._returncode

    def stop(self) -> None:
        if not self._release():
            return
        try:
            done = self.transport.run(
                self._stop_script(), timeout_s=self.stop_grace_s + self.transport.connect_timeout_s + 30
            )
        except Exception as exc:  # stop() never raises
            logger.warning(
                f"stopping {self.trial_label} on {self.transport.host} failed: {exc}; "
                "the next start on this port stops it through the pid file"
            )
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
