"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

#: A small SGLang space on the simulated reference host: 16 configurations, three
#: concurrency levels (the ``space`` fixture of tests/conftest.py loads it).
SMALL_SPACE = textwrap.dedent("""
    name: small
    engine: sglang
    hardware: rtx-pro-6000-pcie-x8
    model: kimi-k2.6
    launch:
      command: [python3, -m, sglang.launch_server]
      flags: {--model-path: /models/Kimi-K2.6, --tp-size: 8, --mem-fraction-static: 0.88,
              --max-running-requests: 256, --num-continuous-decode-steps: 8}
    parameters:
      ep_size: {flag: --ep-size, type: categorical, choices: [1, 4, 8, 3]}
      enable_eplb: {flag: --enable-eplb, type: bool}
      disable_cuda_graph: {flag: --disable-cuda-graph, type: bool}
    workload: {kind: burst, levels: [1, 64, 128], max_tokens: 512, single_max_tokens: 128}
""")


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
    "layout": "tp8",
    "ep_size": 8,
    "moe_dense_tp_size": None,
    "enable_eplb": False,
    "moe_a2a_backend": "none",
    "disable_cuda_graph": False,
    "cuda_graph_max_bs": 256,
    "max_running_requests": 256,
    "num_continuous_decode_steps": 8,
    "mem_fraction_static": 0.88,
    "nccl_proto": "LL",
    "nccl_min_nchannels": 8,
    "nccl_max_nchannels": 16,
    "nccl_nthreads": 512,
    "nccl_buffsize": 16777216,
}
