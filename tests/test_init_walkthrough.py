"""The README's "your own model and host" walkthrough, run command by command.

The commands are read from the README block between ``<!-- walkthrough -->`` markers, so
the documentation and this test cannot drift apart. Two stand-ins, because there is no
GPU host here: the model directory is the fixture ``config.json`` of Qwen3-235B-A22B, and
``--host gpu-box`` becomes a stand-in ``nvidia-smi`` of an 8x H100 box run locally (the
ssh path is covered against a real sshd in ``test_profile_host.py``).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SMI = FIXTURES / "nvidia_smi" / "8x-h100-sxm"


def walkthrough() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- walkthrough -->\n(.*?)<!-- /walkthrough -->", text, re.S)
    assert block, "README.md has no walkthrough block"
    return [shlex.split(line) for line in block.group(1).splitlines() if line.strip()]


def test_readme_walkthrough(workdir: Path) -> None:
    smi = workdir / "nvidia-smi"
    smi.write_text(
        f'#!/bin/sh\nif [ "$1" = topo ]; then cat {SMI / "topo-m.txt"}; '
        f"else cat {SMI / 'query-gpu.csv'}; fi\n"
    )
    smi.chmod(0o755)
    commands = walkthrough()
    assert [c[:2] for c in commands] == [
        ["tuner", "profile"],
        ["tuner", "profile"],
        ["tuner", "init"],
        ["tuner", "search"],
        ["tuner", "best"],
    ]
    outputs = []
    for argv in commands:
        if argv[1:3] == ["profile", "model"]:
            argv[3] = str(FIXTURES / "model_configs" / "qwen3-235b-a22b")
        if argv[1:3] == ["profile", "host"]:
            i = argv.index("--host")
            argv[i : i + 2] = ["--nvidia-smi", str(smi)]
        done = subprocess.run(
            [sys.executable, "-m", "tuner", *argv[1:]], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{shlex.join(argv)}: {done.stderr}"
        outputs.append(done)
    space = yaml.safe_load((workdir / "qwen3-gpu-box.yaml").read_text())
    assert space["model"] == str(workdir / "qwen3-235b.yaml")
    assert space["hardware"] == str(workdir / "gpu-box.yaml")
    assert space["launch"]["flags"]["--model-path"] == "/models/Qwen3-235B-A22B"
    assert "20 trials" in outputs[3].stdout
    best = outputs[4].stdout
    assert "sglang.launch_server" in best and "--model-path /models/Qwen3-235B-A22B" in best
