"""Reuse keys on the resolved server: a study that asks for one server several ways
launches it once.

SGLang sets ep_size = tp_size under DeepEP, so with tp 8, ``--ep-size 1/2/4/8`` and
``--moe-a2a-backend deepep`` are four spellings of one server; without DeepEP they are
four servers. A `tuner search --backend local` study over the emulator (real processes,
real HTTP) with all eight configurations queued must launch five servers, show the
rewrite on the trials that asked for another ep, and read the resolved settings back
from each server's ``/server_info``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import emulator_pids
from tuner.net import free_port
from tuner.storage import load_study


def test_a_rewrite_prone_space_launches_each_resolved_server_once(workdir: Path):
    port = free_port()
    space = workdir / "deepep.yaml"
    start = "\n".join(
        f"  - {{ep_size: {ep}, moe_a2a_backend: {a2a}}}" for a2a in ("deepep", "none") for ep in (1, 2, 4, 8)
    )
    space.write_text(
        textwrap.dedent(f"""
        name: deepep
        engine: sglang
        engine_version: "0.5.23"
        hardware: rtx-pro-6000-pcie-x8
        model: kimi-k2.6
        launch:
          command: [python3, -m, tuner.sim.server, --speedup, "20", --load-delay, "0.2", --]
          flags: {{--model-path: /models/Kimi-K2.6, --tp-size: 8, --host: 127.0.0.1, --port: {port},
                  --max-running-requests: 32, --deepep-mode: low_latency,
                  --cuda-graph-max-bs-decode: 64}}
        parameters:
          ep_size: {{flag: --ep-size, type: categorical, choices: [1, 2, 4, 8]}}
          moe_a2a_backend: {{flag: --moe-a2a-backend, type: categorical, choices: [deepep, none]}}
        workload: {{kind: burst, levels: [1, 8], max_tokens: 32, single_max_tokens: 16}}
        start:
        """)
        + start
        + "\n"
    )
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "search", "--backend", "local", "--space", str(space),
         "--budget", "8", "--health-timeout", "30", "--no-annotate", "--no-prune"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = load_study("deepep", None).get_trials()
    assert len(trials) == 8
    launched = [t for t in trials if "reused_from" not in t.user_attrs]
    assert all(t.user_attrs["outcome"] == "complete" for t in launched)
    assert all(t.user_attrs["outcome"] == "reused" for t in trials if t not in launched)
    # Each resolved server is launched once, except the study's deliberate re-measurements
    # (a leader's repeat, an outlier's check), which launch a server already measured.
    first = [t for t in launched if "repeat_of" not in t.user_attrs]
    servers = [t.user_attrs["server_key"] for t in first]
    assert len(servers) == len(set(servers)) >= 4  # one DeepEP server, plain ones
    assert all(t.user_attrs["server_key"] in servers for t in launched if t not in first)
    logs = workdir / "studies" / "deepep"
    started = sorted(p.name for p in logs.glob("trial-*.log"))
    assert started == sorted(f"trial-{t.number}.log" for t in launched)

    deepep = [t for t in trials if t.params["moe_a2a_backend"] == "deepep"]
    first = min(deepep, key=lambda t: t.number)
    for t in deepep:
        asked = t.params["ep_size"]
        if asked != 8:  # the silent rewrite, shown on the trial
            assert t.user_attrs["rewrites"] == {"ep_size": [asked, 8]}
        if t is not first:
            assert t.user_attrs["reused_from"] == first.number
    assert all("rewrites" not in t.user_attrs for t in trials if t.params["moe_a2a_backend"] == "none")

    # read back: the running server reports what was intended (ep 8, the asked graph limit)
    info = first.user_attrs["server_info"]
    assert info["ep_size"] == 8 and info["cuda_graph_config"]["decode"]["max_bs"] == 64
    assert all("server_differs" not in t.user_attrs for t in launched)
    assert emulator_pids(port) == []

    listing = subprocess.run(
        [sys.executable, "-m", "tuner", "trials"], capture_output=True, text=True, timeout=60, env=env
    )
    assert "SGLang resolves ep_size 2 -> 8" in listing.stdout
