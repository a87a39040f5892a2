"""Fixtures of the launcher tests (a pytest plugin, registered in tests/conftest.py):
emulator launch specs, a throwaway sshd on loopback, and the systemctl/journalctl
stand-in on PATH.

Everything here starts processes on loopback only and stops them by pid.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tuner.engines.base import LaunchSpec
from tuner.net import free_port
from tuner.transports.ssh import SshTransport

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
STANDIN = Path(__file__).parent / "standins" / "systemd_standin.py"

#: Fast emulator: 1000x faster than the modelled host, and a short "model load" (half of
#: it refusing connections, half answering 503).
SPEEDUP = 1000
LOAD_DELAY_S = 0.5


def emulator_argv(
    port: int, *flags: str, load_delay: float = LOAD_DELAY_S, speedup: float = SPEEDUP
) -> list[str]:
    """The SGLang-compatible emulator of the reference host and model, with SGLang
    ``flags`` (TP8 unless ``flags`` say otherwise) on ``127.0.0.1:port``."""
    sglang = list(flags) if "--tp-size" in flags else ["--tp-size", "8", *flags]
    return [
        sys.executable,
        "-m",
        "tuner.sim.server",
        "--hardware",
        "rtx-pro-6000-pcie-x8",
        "--model",
        "kimi-k2.6",
        "--speedup",
        str(speedup),
        "--load-delay",
        str(load_delay),
        "--",
        *sglang,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def emulator_spec(port: int, *flags: str, env: dict[str, str] | None = None, **kw: float) -> LaunchSpec:
    """A launch of the emulator as an SGLang :class:`LaunchSpec`."""
    env = {"NCCL_PROTO": "LL"} if env is None else env
    return LaunchSpec(argv=emulator_argv(port, *flags, **kw), env=env, engine="sglang")


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def wait_until(predicate, timeout_s: float = 5.0, step_s: float = 0.05) -> bool:
    """Poll ``predicate`` until true or ``timeout_s``; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return bool(predicate())


def chat(base_url: str, max_tokens: int = 16) -> dict:
    """One short chat completion, as the load generator would send it."""
    import httpx

    body = {
        "model": "kimi-k2.6",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens,
    }
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=30, trust_env=False)
    response.raise_for_status()
    return response.json()


# -- sshd ------------------------------------------------------------------------------


@dataclass
class SshServer:
    """A running throwaway sshd and the client configuration that reaches it."""

    port: int
    config_file: Path
    control_dir: Path
    home: Path
    proc: subprocess.Popen | None = None

    def transport(self, **kw) -> SshTransport:
        """An :class:`SshTransport` to ``localhost`` through this server."""
        return SshTransport(
            "localhost", config_file=self.config_file, control_dir=self.control_dir, connect_timeout_s=5, **kw
        )

    def start(self) -> None:
        """Start sshd listening on :attr:`port` (again, after :meth:`stop`)."""
        with open(self.home / "sshd.log", "ab") as sshd_log:
            proc = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(self.home / "sshd_config")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=sshd_log,
                start_new_session=True,
            )
        self.proc = proc
        if not wait_until(lambda: _accepts(self.port) or proc.poll() is not None, 10):
            self.stop()
            pytest.fail("sshd did not start listening")
        if proc.poll() is not None:
            pytest.fail(f"sshd exited: {(self.home / 'sshd.log').read_text()}")

    def stop(self) -> None:
        """Stop sshd as stopping a host's ssh service does: the listener and the
        connections it serves. Each connection's sshd runs in a session of its own (sshd
        calls setsid), so they are found as the listener's descendants, by pid. A server
        started through ssh with ``setsid ... &`` left that tree when its starting shell
        exited, and keeps running (as on a real host)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        served = descendants(proc.pid)
        for pid in [proc.pid, *served]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if not wait_until(lambda: not any(pid_alive(p) for p in served), 5):
            for pid in served:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    """Live processes below ``pid`` (children, their children...), found through /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return [p for p in found if pid_alive(p)]


def _keygen(path: Path) -> None:
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@contextlib.contextmanager
def running_sshd() -> Iterator[SshServer]:
    """Debian's OpenSSH server on a loopback port, with its own host key, user key,
    authorized_keys, sshd_config and client ssh_config, all in a temporary directory;
    stopped at the end. Skips the test when ``/usr/sbin/sshd`` is not installed (Debian:
    ``openssh-server``)."""
    if not SSHD.exists():
        pytest.skip("/usr/sbin/sshd is missing: install the openssh-server package")
    if shutil.which("ssh") is None:
        pytest.skip("the ssh client is missing: install the openssh-client package")
    # Short path: ssh's ControlPath is a Unix socket (about 104 bytes at most).
    root = Path(tempfile.mkdtemp(prefix="tssh-"))
    try:
        _keygen(root / "host_key")
        _keygen(root / "user_key")
        shutil.copy(root / "user_key.pub", root / "authorized_keys")
        port = free_port()
        user = pwd.getpwuid(os.getuid()).pw_name
        (root / "sshd_config").write_text(
            f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {root}/host_key\n"
            f"AuthorizedKeysFile {root}/authorized_keys\nStrictModes no\nPidFile {root}/sshd.pid\n"
            "UsePAM no\nPermitRootLogin yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "AuthenticationMethods publickey\nAllowTcpForwarding yes\nX11Forwarding no\n"
            "MaxSessions 50\nMaxStartups 50\n"
        )
        (root / "ssh_config").write_text(
            f"Host localhost\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n"
            f"  IdentityFile {root}/user_key\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {root}/known_hosts\n  StrictHostKeyChecking accept-new\n"
            "  LogLevel ERROR\n"
        )
        if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
            # sshd running as root needs its privilege-separation directory (the
            # distribution's service unit creates it at boot).
            Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
        server = SshServer(port=port, config_file=root / "ssh_config", control_dir=root / "cm", home=root)
        server.start()
        try:
            yield server
            server.transport().close()
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    """A throwaway sshd on loopback for the module's tests (see :func:`running_sshd`)."""
    with running_sshd() as server:
        yield server


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


# -- systemctl / journalctl stand-in ---------------------------------------------------------


@dataclass
class SystemdStandin:
    """Where the stand-in reads unit files and keeps its state, and its two commands
    (wrapper scripts that carry the stand-in's settings, so they also work when run
    through ssh, where the test's environment does not reach)."""

    unit_dir: Path
    state_dir: Path
    systemctl: Path
    journalctl: Path


@pytest.fixture
def systemd_standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SystemdStandin:
    """Put the ``systemctl``/``journalctl`` STAND-IN (tests/standins/systemd_standin.py,
    not systemd) first on PATH, serving units from a temporary unit directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    unit_dir, state_dir = tmp_path / "units", tmp_path / "standin-state"
    unit_dir.mkdir()
    for tool in ("systemctl", "journalctl"):
        script = bin_dir / tool
        script.write_text(
            "#!/bin/sh\n"
            f"TUNER_STANDIN_UNIT_DIR={shlex.quote(str(unit_dir))} "
            f"TUNER_STANDIN_STATE_DIR={shlex.quote(str(state_dir))} "
            f'exec {shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))} {tool} "$@"\n'
        )
        script.chmod(0o755)
    standin = SystemdStandin(
        unit_dir=unit_dir,
        state_dir=state_dir,
        systemctl=bin_dir / "systemctl",
        journalctl=bin_dir / "journalctl",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return standin
