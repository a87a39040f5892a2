"""`tuner search --backend local` end to end: real emulator processes, real HTTP, real logs.

Three enqueued trials: one that runs its sweep, one that fails to start (SGLang's OOM at a
too-low --mem-fraction-static), and one whose server dies in the middle of its sweep (the
emulator's TUNER_EMULATOR_FAIL_AFTER_S). Afterwards no emulator process of the test is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna

from tests.helpers import emulator_pids
from tuner import trial_record
from tuner.net import free_port
from tuner.sim.model import PerfModel
from tuner.sim.server import split_argv
from tuner.storage import load_study
from tuner.trial_record import TrialRecord


def test_local_backend_study_with_oom_and_a_server_killed_mid_sweep(workdir: Path):
    port = free_port()
    space = workdir / "emu.yaml"
    space.write_text(
        textwrap.dedent(f"""
        name: emu
        engine: sglang
        hardware: rtx-pro-6000-pcie-x8
        model: kimi-k2.6
        launch:
          command: [python3, -m, tuner.sim.server, --speedup, "5", --load-delay, "0.5", --]
          flags: {{--model-path: /models/Kimi-K2.6, --tp-size: 8, --host: 127.0.0.1, --port: {port},
                  --max-running-requests: 64}}
        parameters:
          ep_size: {{flag: --ep-size, type: categorical, choices: [1, 8]}}
          mem_fraction_static: {{flag: --mem-fraction-static, type: categorical, choices: [0.88, 0.7]}}
          crash_after_s: {{env: TUNER_EMULATOR_FAIL_AFTER_S, type: categorical, choices: [null, 2.5]}}
        workload: {{kind: burst, levels: [1, 64], max_tokens: 256, single_max_tokens: 64}}
        start:
          - {{ep_size: 8, mem_fraction_static: 0.88}}
          - {{ep_size: 1, mem_fraction_static: 0.7}}
          - {{ep_size: 1, mem_fraction_static: 0.88, crash_after_s: 2.5}}
    """)
    )
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "search",
            "--backend",
            "local",
            "--space",
            str(space),
            "--budget",
            "3",
            "--health-timeout",
            "30",
            "--no-annotate",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    study = load_study("emu", None)
    ok, oom, killed = study.get_trials()
    assert ok.state == optuna.trial.TrialState.COMPLETE and ok.user_attrs["outcome"] == "complete"
    assert [lv["concurrency"] for lv in ok.user_attrs["levels"]] == [1, 64]
    assert all(lv["completed"] == lv["concurrency"] for lv in ok.user_attrs["levels"])
    assert ok.user_attrs["startup_s"] > 0.4
    # SGLang's log says how much GPU memory the server had left after start-up (the
    # emulator writes the line from its memory plan); the trial keeps it and lists it.
    record = TrialRecord.of(ok)
    _, sglang_argv = split_argv(record.argv)
    plan = PerfModel.build("rtx-pro-6000-pcie-x8", "kimi-k2.6", sglang_argv, record.env).memory
    assert record.memory_left_gib == round(plan.available_gib, 2) > 0
    assert ok.user_attrs["server_info"]["cuda_graph_mem_gib"] == round(plan.cuda_graph_gib, 2) > 0
    # ... and the KV cache pool it allocated, which the walk weighs a memory fraction by.
    assert trial_record.kv_cache_gib(ok) == round(plan.kv_pool_gib, 2) > 0

    assert oom.user_attrs["outcome"] == "failed" and oom.user_attrs["failure_class"] == "oom"
    assert "Not enough memory" in oom.user_attrs["reason"]
    assert oom.system_attrs["constraints:launch"] > 0

    assert killed.user_attrs["outcome"] == "failed" and killed.user_attrs["failure_class"] == "crash"
    assert len(killed.user_attrs["levels"]) < 2  # the sweep did not finish

    logs = workdir / "studies" / "emu"
    assert "The server is fired up and ready to roll!" in (logs / "trial-0.log").read_text()
    assert "Not enough memory" in (logs / "trial-1.log").read_text()
    assert (logs / "trial-2.log").exists()
    assert emulator_pids(port) == []

    def tuner(*words: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "tuner", *words], capture_output=True, text=True, timeout=60, env=env
        ).stdout

    best = json.loads(tuner("best", "--format", "json"))
    assert best["trial"] == 0 and best["confidence"]["kv_cache_gib"] == record.kv_cache_gib
    listed = tuner("trials", "--columns", "trial,state,mem_left,kv_pool")
    rows = {line.split()[0]: line.split()[1:] for line in listed.splitlines() if line.startswith("#")}
    assert rows["#0"] == ["complete", f"{record.memory_left_gib:.1f}", f"{record.kv_cache_gib:.1f}"]
    assert rows["#1"] == ["failed", "-", "-"]  # it never started: no memory to report
