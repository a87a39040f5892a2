"""The simulator on profiles written by ``tuner profile``: dense and MoE, GQA and MLA, and
memory plans that reproduce what is known about fitting these models on these hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner import init_space
from tuner.engines import sglang
from tuner.failures import LaunchFailure
from tuner.metrics import summarize
from tuner.profiles import HardwareProfile, ModelProfile
from tuner.profiling.host import read_host
from tuner.profiling.model_config import read_model
from tuner.sim.model import PerfModel
from tuner.sim.serving import simulate_sweep
from tuner.workload import Workload

FIXTURES = Path(__file__).parent / "fixtures"


def model(name: str) -> ModelProfile:
    return read_model(FIXTURES / "model_configs" / name).profile


def host(name: str, gpus: int | None = None) -> HardwareProfile:
    d = FIXTURES / "nvidia_smi" / name
    hw = read_host((d / "query-gpu.csv").read_text(), (d / "topo-m.txt").read_text()).profile
    return hw if gpus is None else hw.model_copy(update={"gpu_count": gpus})


def launch(m: ModelProfile, hw: HardwareProfile, flags: str) -> PerfModel:
    return PerfModel(hw, m, sglang.parse_args(flags), {})


def test_deepseek_v3_fp8_does_not_fit_8x_h100_and_fits_8x_h200() -> None:
    ds = model("deepseek-v3")
    for fraction in (0.88, 0.95):
        with pytest.raises(LaunchFailure, match="Not enough memory"):
            launch(ds, host("8x-h100-sxm"), f"--tp-size 8 --mem-fraction-static {fraction}")
    with pytest.raises(init_space.NoFit, match=r"78\.\d GiB \(tp8\).*79\.\d GiB GPU"):
        init_space.draft(ds, host("8x-h100-sxm"), model_ref="m", hardware_ref="h")
    plan = launch(ds, host("8x-h200-sxm"), "--tp-size 8").memory
    assert plan.weights_gib_per_gpu == pytest.approx(78.3, abs=0.5)  # ~673 GB / 8
    assert plan.kv_tokens > 500_000  # MLA: ~69 KiB per token, ~40 GiB of pool


def test_llama_70b_bf16_needs_two_80gb_gpus_and_then_has_a_small_kv_pool() -> None:
    llama = model("llama-3.1-70b")
    with pytest.raises(LaunchFailure, match="Not enough memory"):
        launch(llama, host("8x-h100-sxm", gpus=1), "--tp-size 1 --mem-fraction-static 0.95")
    tp2 = launch(llama, host("8x-h100-sxm", gpus=2), "--tp-size 2").memory
    tp4 = launch(llama, host("8x-h100-sxm", gpus=4), "--tp-size 4").memory
    assert tp2.weights_gib_per_gpu == pytest.approx(65.7, abs=0.3)  # 141 GB / 2
    assert tp2.kv_bytes_per_token == 80 * 2 * 4 * 128 * 2  # GQA: 4 of 8 KV heads per GPU, BF16
    assert tp2.kv_pool_gib < 5
    assert tp4.kv_tokens > 10 * tp2.kv_tokens


def test_gqa_kv_heads_shard_and_mla_latent_replicates() -> None:
    qwen, ds = model("qwen3-235b-a22b"), model("deepseek-v3")
    h200 = host("8x-h200-sxm")
    per_token = {
        tp: launch(qwen, h200, f"--tp-size {tp} --pp-size {8 // tp}").memory.kv_bytes_per_token
        for tp in (2, 4, 8)
    }
    # 4 KV heads: 2 per GPU under TP2, 1 under TP4 and (replicated) TP8; per stage of layers.
    assert per_token[2] == 94 / 4 * 2 * 2 * 128 * 2
    assert per_token[4] == 94 / 2 * 2 * 1 * 128 * 2
    assert per_token[8] == 94 * 2 * 1 * 128 * 2
    assert launch(ds, h200, "--tp-size 8").memory.kv_bytes_per_token == 61 * 576 * 2


@pytest.mark.parametrize(
    ("name", "hw", "flags"),
    [
        ("qwen3-32b", "4x-l40s", "--tp-size 4 --mem-fraction-static 0.8"),
        ("llama-3.1-70b", "8x-rtx-pro-6000", "--tp-size 8"),
        ("gpt-oss-120b", "8x-h100-sxm", "--tp-size 8 --ep-size 8"),
        ("glm-4.5", "8x-h200-sxm", "--tp-size 8 --ep-size 4"),
        ("kimi-k2.5", "8x-h200-sxm", "--tp-size 8 --dp-size 8 --enable-dp-attention"),
    ],
)
def test_dense_and_moe_profiles_simulate_a_sweep(name: str, hw: str, flags: str) -> None:
    pm = launch(model(name), host(hw), flags)
    levels = simulate_sweep(
        pm, Workload(levels=(1, 64), max_tokens=128, single_max_tokens=64), seed=0, noise=0
    )
    single, peak = (summarize(lv).output_tok_s for lv in levels)
    assert 0 < single < peak
