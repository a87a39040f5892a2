"""SGLang's flags per release, parsed as SGLang's argparse parses them, and the pre-flight
where no SGLang is installed (the tuner's rules stand in).

The flag tables are SGLang's own parsers dumped (tuner/preflight/sglang_probe.py
--dump-options); tests/test_sglang_real.py checks the shipped 0.5.23 table against the
installed package.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tuner.engines import sglang
from tuner.engines.base import LaunchSpec
from tuner.failures import LaunchFailure
from tuner.preflight import HostPreflight
from tuner.space import SpaceError, load_space

PREFIX = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Kimi-K2.6"]


def refusal(argv: list[str], version: str = "0.5.23") -> str:
    with pytest.raises(LaunchFailure) as exc:
        sglang.ENGINE.for_version(version).check([*PREFIX, *argv], 8)
    assert exc.value.reason == "invalid-args"
    return exc.value.message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--cuda-graph-max-bs", "256"],
            "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        ),
        (
            ["--pp", "2"],
            "sglang serve: error: ambiguous option: --pp could match --pp-size, "
            "--pp-max-micro-batch-size, --pp-async-batch-depth",
        ),
        (["--enable-turbo"], "sglang serve: error: unrecognized arguments: --enable-turbo"),
        (["--tp-size", "eight"], "sglang serve: error: argument --tp-size/--tensor-parallel-size: "
                                 "invalid int value: 'eight'"),
    ],
)  # fmt: skip
def test_sglang_023_refuses_what_its_argparse_refuses(argv: list[str], message: str):
    assert refusal(argv) == message


def test_choice_lists_are_the_releases_own():
    assert {"mxfp8", "nvfp4", "fp4_mx_block16"} <= set(sglang.choices("0.5.23", "kv_cache_dtype"))
    assert {"flashinfer", "deepep_v2", "nixl", "mooncake"} <= set(sglang.choices("0.5.23", "moe_a2a_backend"))
    args = sglang.ENGINE.parse([*PREFIX, "--kv-cache-dtype", "nvfp4", "--cuda-graph-max-bs-decode", "64"])
    assert args.kv_cache_dtype == "nvfp4" and args.cuda_graph_max_bs == 64


def test_releases_differ_in_their_flags():
    # 0.5.22 still has this flag, 0.5.23 removed it
    assert "--speculative-skip-dp-mlp-sync" in sglang.flag_spellings("0.5.22")
    assert "--speculative-skip-dp-mlp-sync" not in sglang.flag_spellings("0.5.23")
    sglang.ENGINE.for_version("0.5.22").check([*PREFIX, "--speculative-skip-dp-mlp-sync"], 8)
    assert refusal(["--speculative-skip-dp-mlp-sync"]).endswith(
        "unrecognized arguments: --speculative-skip-dp-mlp-sync"
    )
    assert sglang.nearest_release("0.5.24") == "0.5.23"
    assert sglang.nearest_release("0.5.22.post1") == "0.5.22"
    with pytest.raises(KeyError, match=r"known releases: 0\.5\.22, 0\.5\.23"):
        sglang.ENGINE.for_version("0.4.0")


@pytest.mark.parametrize("backend", ["deepep", "mooncake", "flashinfer", "deepep_v2", "nixl"])
def test_all_to_all_backends_force_ep_to_tp(backend: str):
    asked = [*PREFIX, "--tp-size", "8", "--ep-size", "2", "--moe-a2a-backend", backend]
    assert sglang.ENGINE.resolve(asked, 8).ep_size == 8
    same = [*PREFIX, "--tp-size", "8", "--ep-size", "8", "--moe-a2a-backend", backend]
    assert sglang.ENGINE.server_identity(asked, 8) == sglang.ENGINE.server_identity(same, 8)


def test_a_space_names_its_release(tmp_path: Path):
    doc = {
        "name": "r",
        "engine": "sglang",
        "engine_version": "0.5.22",
        "hardware": "rtx-pro-6000-pcie-x8",
        "model": "kimi-k2.6",
        "launch": {"command": ["python3", "-m", "sglang.launch_server"], "flags": {"--tp-size": 8}},
    }
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert load_space(path).engine.version == "0.5.22"
    path.write_text(yaml.safe_dump({**doc, "engine_version": "0.3.0"}))
    with pytest.raises(SpaceError) as exc:
        load_space(path)
    assert "engine_version" in str(exc.value) and "known releases: 0.5.22, 0.5.23" in str(exc.value)


def test_the_reference_space_uses_its_releases_spelling():
    space = load_space("kimi-k2.6-8x-rtx-pro-6000")
    assert space.engine.version == "0.5.23"
    argv = space.render({**space.start_points()[0], "cuda_graph_max_bs": 256}).argv
    assert "--cuda-graph-max-bs-decode" in argv
    assert all(space.check(p) == [] for p in space.start_points())


def test_without_sglang_on_the_host_the_tuners_rules_stand_in():
    """This interpreter has no sglang: the probe says so once, the pre-flight answers None
    (no verdict, the tuner's rules decide) and is not tried again for that interpreter."""
    host = HostPreflight()
    spec = LaunchSpec(argv=[sys.executable, "-m", "sglang.launch_server", "--tp-size", "8"], engine="sglang")
    assert host.verdict(spec) is None
    assert "sglang" in (host.unavailable(sys.executable) or "")
    assert host.version(sys.executable) is None
    emulator = [sys.executable, "-m", "tuner.sim.server", "--", "--tp-size", "8"]
    other = LaunchSpec(argv=emulator, engine="sglang")
    assert HostPreflight.interpreter(other) is None  # the emulator is not probed
