"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import shutil
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


#: Debian's Chromium, when installed.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Headless Chromium on a closed network: no background traffic, no sandbox (root), no GPU.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
