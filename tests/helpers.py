"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import socket
from pathlib import Path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emulator_pids(port: int) -> list[int]:
    """Live (non-zombie) emulator processes serving ``port``, found through /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if "tuner.sim.server" in cmd and f"--port {port}" in cmd and state != "Z":
            out.append(int(entry.name))
    return out
