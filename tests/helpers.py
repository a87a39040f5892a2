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


#: The hand-tuned reference configuration of the default space (DESIGN: TP8 + EP8, tuned NCCL
#: as in the reference campaign, tuner/sim/calibration.py).
BEST = {
    "layout": "tp8", "ep_size": 8, "moe_dense_tp_size": None, "enable_eplb": False,
    "moe_a2a_backend": "none", "disable_cuda_graph": False, "cuda_graph_max_bs": 256,
    "max_running_requests": 256, "num_continuous_decode_steps": 8, "mem_fraction_static": 0.88,
    "nccl_proto": "LL", "nccl_min_nchannels": 8, "nccl_max_nchannels": 16, "nccl_nthreads": 512,
    "nccl_buffsize": 16777216,
}
