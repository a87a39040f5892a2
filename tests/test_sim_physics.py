"""Physics of the performance model beyond the calibration points."""

from __future__ import annotations

import pytest

from tuner import profiles
from tuner.engines import sglang
from tuner.failures import LaunchFailure
from tuner.metrics import summarize
from tuner.sim.model import PerfModel
from tuner.sim.serving import ServingSimulator, simulate_sweep
from tuner.workload import Workload

HW, MODEL = "rtx-pro-6000-pcie-x8", "kimi-k2.6"
BASE = "--tp-size 8 --mem-fraction-static 0.88 --max-running-requests 256 --num-continuous-decode-steps 8"


def build(flags: str = BASE, env: dict | None = None, hw: str = HW) -> PerfModel:
    return PerfModel.build(hw, MODEL, flags, env or {})


@pytest.mark.parametrize("extra", ["", "--ep-size 8", "--pp-size 2 --tp-size 4"])
def test_more_memory_bandwidth_never_slows(extra):
    flags = f"{BASE} {extra}".replace("--tp-size 8 --mem", "--mem") if "--pp" in extra else f"{BASE} {extra}"
    hw = profiles.hardware(HW)
    faster = hw.model_copy(update={"gpu": hw.gpu.model_copy(update={"memory_bandwidth_gbs": 2 * 1792})})
    args = sglang.parse_args(flags)
    slow, fast = PerfModel(hw, profiles.model(MODEL), args), PerfModel(faster, profiles.model(MODEL), args)
    for b in (1, 8, 64, 256):
        assert fast.decode_step_s(b, b * 1000) <= slow.decode_step_s(b, b * 1000)


def _peak(flags: str, env=None) -> float:
    wl = Workload(levels=(64, 192, 256), max_tokens=1024)
    return max(summarize(lv).output_tok_s for lv in simulate_sweep(build(flags, env), wl, noise=0))


def test_raising_max_running_requests_never_lowers_throughput_unless_kv_binds():
    flags = "--tp-size 8 --ep-size 8 --mem-fraction-static 0.88 --num-continuous-decode-steps 8"
    values = []
    for cap in (32, 64, 128):
        pm = build(f"{flags} --max-running-requests {cap}")
        assert pm.memory.kv_tokens > cap * 1100  # KV does not bind for 1024-token replies
        values.append(_peak(f"{flags} --max-running-requests {cap}"))
    assert values == sorted(values)


@pytest.mark.parametrize("model", ["kimi-k2.6", "deepseek-v3"])
def test_nvlink_spends_far_less_of_the_step_in_all_reduce(model):
    # (Neither checkpoint fits 8x H100 80 GB, so the NVLink side is the H200 profile.)
    pcie = PerfModel.build(HW, model, BASE, {})
    nv = PerfModel.build("h200-sxm-x8", model, BASE, {})
    # Bandwidth-bound batches: far less. One stream is latency-bound on both (NCCL picks LL for
    # small messages on PCIe too, ~25 us against ~8 us), and the NVLink host's step is also
    # shorter, so the share is lower but not halved.
    for b in (64, 256):
        assert nv.allreduce_share(b) < 0.5 * pcie.allreduce_share(b)
    assert nv.allreduce_share(1) < 0.6 * pcie.allreduce_share(1)


def test_too_big_a_checkpoint_fails_to_load():
    with pytest.raises(LaunchFailure) as exc:
        PerfModel.build("h100-sxm-x8", "deepseek-v3", BASE, {})
    assert exc.value.reason == "oom"


def test_ll_protocol_helps_small_batches_and_hurts_large_ones_on_pcie():
    # NCCL's tuner already picks LL for small messages: forcing it costs one stream nothing,
    # forcing Simple costs it the Simple latency; forced LL loses at large batches.
    default, ll = build(), build(env={"NCCL_PROTO": "LL"})
    simple = build(env={"NCCL_PROTO": "Simple"})
    assert ll.decode_step_s(1, 500) <= default.decode_step_s(1, 500) < simple.decode_step_s(1, 500)
    assert ll.decode_step_s(256, 256 * 1000) > default.decode_step_s(256, 256 * 1000)


def test_too_high_mem_fraction_fails_cuda_graph_capture():
    with pytest.raises(LaunchFailure) as exc:
        build(BASE.replace("0.88", "0.95"))
    assert exc.value.reason == "cuda-graph-oom"
    assert "Capture cuda graph failed" in exc.value.message


def test_too_low_mem_fraction_leaves_no_kv_room():
    with pytest.raises(LaunchFailure) as exc:
        build(BASE.replace("0.88", "0.7"))
    assert exc.value.reason == "oom"
    assert "Not enough memory. Please try to increase --mem-fraction-static" in exc.value.message


def test_kv_capacity_caps_the_running_batch():
    pm = build("--tp-size 8 --mem-fraction-static 0.80 --max-running-requests 100000")
    assert pm.memory.max_running_requests == pm.memory.kv_tokens // 2
    assert pm.memory.max_running_requests < 100000


@pytest.mark.parametrize(
    "flags, reason, text",
    [
        (
            "--tp-size 8 --moe-dense-tp-size 4",
            "invalid-args",
            "moe_dense_tp_size only supports None, 1, or tp_size",
        ),
        ("--tp-size 8 --enable-eplb", "invalid-args", "ep_size > 1"),
        ("--tp-size 8 --ep-size 3", "invalid-args", "divisible"),
        ("--tp-size 4 --ep-size 8", "crash", "ZeroDivisionError"),
        ("--tp-size 8 --pp-size 2", "invalid-args", "invalid device ordinal"),
        ("--tp-size x", "invalid-args", "invalid int value"),
    ],
)
def test_launch_rules_fail_with_sglang_wording(flags, reason, text):
    with pytest.raises(LaunchFailure) as exc:
        build(flags)
    assert exc.value.reason == reason
    assert text in exc.value.message


def test_deepep_forces_ep_to_tp_and_normal_mode_disables_graphs():
    pm = build("--tp-size 8 --moe-a2a-backend deepep --deepep-mode normal")
    assert pm.args.ep_size == 8 and not pm.args.cuda_graph_enabled


def test_unknown_flags_are_ignored_and_full_command_lines_accepted():
    pm = build("python3 -m sglang.launch_server --model-path /m --some-future-flag 3 --tp-size 8")
    assert pm.args.tp_size == 8


def test_noise_zero_is_deterministic_and_noise_is_seedable():
    wl = Workload(levels=(1, 32), max_tokens=256)
    pm = build()

    def run(seed, noise):
        return [summarize(lv).output_tok_s for lv in simulate_sweep(pm, wl, seed=seed, noise=noise)]

    assert run(1, 0.0) == run(1, 0.0)
    assert run(3, 0.03) == run(3, 0.03)
    assert run(3, 0.03) != run(4, 0.03)


def test_a_request_set_is_the_same_on_every_launch_and_the_launch_noise_is_not():
    """A reply's length belongs to the request (the model ends it), not to the launch: two
    launches given one request set generate the same replies, request by request, at
    different speeds; closed-loop requests sent again get the same replies too."""
    pm = build()
    for wl in (
        Workload(levels=(64,), max_tokens=1024),
        Workload(
            kind="closed-loop",
            levels=(16,),
            duration_s=20,
            ramp_s=2,
            lengths={"output": {"kind": "lognormal", "median": 120, "sigma": 0.5}},
        ),
    ):

        def launch(seed: int, requests_seed: int, wl: Workload = wl):
            sim = ServingSimulator(pm, seed=seed, noise=0.02, requests_seed=requests_seed)
            sim.warm_up(wl)
            level = sim.run_level(wl, wl.levels[0])
            return [r.output_tokens for r in level.records if r.ok], summarize(level).output_tok_s

        (a, speed_a), (b, speed_b), (other, _) = launch(1, 7), launch(2, 7), launch(1, 8)
        n = min(len(a), len(b))
        assert a[:n] == b[:n] and n >= 16
        assert speed_a != speed_b
        assert other[:n] != a[:n]


def test_a_slower_launch_streams_a_burst_as_much_slower_and_no_more():
    """A launch's speed factor scales every step: a burst of requests (all sent at once)
    then takes that much longer, so its throughput moves one for one with the server's
    speed, and a launch's 2% noise is 2% of the figure (benchmarks/noise_spread.py prints
    where a workload moves more: an SLO, or a closed loop's fixed window)."""
    pm = build()
    wl = Workload(levels=(32,), max_tokens=512)

    def tok_s(factor: float) -> float:
        (level,) = simulate_sweep(pm, wl, noise=0.0, requests_seed=0, launch_factor=factor)
        return summarize(level).output_tok_s

    base, slow, fast = tok_s(1.0), tok_s(1.02), tok_s(0.98)
    assert slow / base == pytest.approx(1 / 1.02, rel=0.003)
    assert fast / base == pytest.approx(1 / 0.98, rel=0.003)


def test_ignore_eos_generates_exactly_max_tokens():
    wl = Workload(levels=(8,), max_tokens=300, ignore_eos=True)
    (level,) = simulate_sweep(build(), wl, noise=0)
    assert all(r.output_tokens == 300 for r in level.records)
    assert all(len(r.token_times) == 300 for r in level.records)


def test_chat_replies_end_on_their_own_near_1600_tokens_at_2048():
    wl = Workload(levels=(128,), max_tokens=2048)
    (level,) = simulate_sweep(build(), wl, noise=0, seed=5)
    mean = sum(r.output_tokens for r in level.records) / len(level.records)
    assert 1400 < mean < 1800


def test_closed_loop_and_poisson_workloads_produce_records():
    pm = build()
    closed = Workload(kind="closed-loop", levels=(16,), max_tokens=128, duration_s=30, ramp_s=2)
    (lv,) = simulate_sweep(pm, closed, noise=0)
    m = summarize(lv)
    assert m.completed > 16 and m.wall_s == pytest.approx(30)
    poisson = Workload(kind="poisson", levels=(10,), max_tokens=128, duration_s=20, rate=0.1)
    (lv,) = simulate_sweep(pm, poisson, noise=0)
    assert summarize(lv).completed == len(lv.records) > 5


@pytest.mark.parametrize(
    "level, p2p", [("4", True), ("SYS", True), ("3", False), ("PHB", False), ("9", True)]
)
def test_nccl_p2p_level_integers_read_as_nccl_reads_them(level, p2p):
    # NCCL's legacy integers: LOC=0, PIX=1, PXB=2, PHB=3, SYS=4 (larger clamps to SYS). The
    # reference host's GPUs are SYS apart, so NCCL_P2P_LEVEL=4, the common launch, keeps P2P.
    pm = build(env={"NCCL_P2P_LEVEL": level})
    assert pm.nccl.p2p is p2p
    assert bool(pm.decode_step_s(64, 64 * 1000) == build().decode_step_s(64, 64 * 1000)) is p2p


def test_32k_prefill_chunk_with_fp8_kv_fits_96gb_cards():
    # A launch that runs on 8x RTX PRO 6000: TP8 EP8, fp8 KV, 32768-token chunks, mem-fraction 0.9.
    pm = build(
        "--tp-size 8 --ep-size 8 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 32768 "
        "--mem-fraction-static 0.9"
    )
    mem = pm.memory
    assert mem.chunked_prefill_size == 32768 and mem.cuda_graph_max_bs > 0
    assert mem.activation_gib + mem.cuda_graph_gib + mem.nccl_buffers_gib <= mem.headroom_gib


@pytest.mark.parametrize(
    "hw, tp, chunk, graphs",
    [
        ("h200-sxm-x8", 8, 8192, 512),
        ("h200-sxm-x8", 2, 8192, 256),
        ("b200-x8", 8, 16384, 512),
        ("b200-x8", 2, 16384, 512),
    ],
)
def test_an_unset_prefill_chunk_and_graph_limit_take_sglangs_defaults_for_the_gpu(hw, tp, chunk, graphs):
    # SGLang's _handle_gpu_memory_settings: 8192 tokens and 256/512 graphs (TP < 4 / >= 4) on
    # 60-160 GiB GPUs, 16384 and 512 at any TP from 160 GiB (B200). Spelling the default out
    # starts the same server, so it must measure the same.
    flags = f"--tp-size {tp} --pp-size {8 // tp} --mem-fraction-static 0.85 --max-running-requests 1024"
    unset = PerfModel.build(hw, "deepseek-v3", flags, {})
    spelled = PerfModel.build(
        hw, "deepseek-v3", f"{flags} --chunked-prefill-size {chunk} --cuda-graph-max-bs-decode {graphs}", {}
    )
    assert (unset.memory.chunked_prefill_size, unset.memory.cuda_graph_max_bs) == (chunk, graphs)
    assert unset.memory == spelled.memory
    burst = Workload(kind="burst", levels=(8,), prompt_tokens=4096, max_tokens=16)
    (a,), (b,) = simulate_sweep(unset, burst, noise=0), simulate_sweep(spelled, burst, noise=0)
    assert summarize(a) == summarize(b)


def test_one_stream_at_30k_context_is_several_ms_slower_than_at_2k():
    pm = build()
    extra_ms = (pm.decode_step_s(1, 30_000) - pm.decode_step_s(1, 2_000)) * 1e3
    assert 3.0 <= extra_ms <= 8.0


def test_step_costs_follow_the_kernel_path_not_one_global_constant():
    kimi = PerfModel.build("h200-sxm-x8", MODEL, "--tp 8", {})
    deepseek = PerfModel.build("h200-sxm-x8", "deepseek-v3", "--tp 8", {})
    assert kimi.path_key == "int4/fa3" and deepseek.path_key == "fp8/fa3"
    assert kimi.path.graph_overhead_us_per_layer > deepseek.path.graph_overhead_us_per_layer
    # The INT4 path's decode attention slows with context far more than KV bandwidth explains.
    assert kimi.decode_step_s(1, 4_000) - kimi.decode_step_s(1, 1_000) > 0.005
    assert deepseek.decode_step_s(1, 4_000) - deepseek.decode_step_s(1, 1_000) < 0.001


def test_prefill_attention_grows_faster_than_the_prompt():
    pm = PerfModel.build("b200-x8", "deepseek-v3", "--tp 8", {})
    # Per token, a 64k-token prefill costs more than a 16k one: attention is quadratic.
    assert pm.prefill_s(65_536) / 65_536 > 1.2 * pm.prefill_s(16_384) / 16_384


def test_time_to_first_token_counts_the_request_overhead_and_queueing():
    pm = PerfModel.build("h200-sxm-x8", "deepseek-v3", "--tp 8", {})
    wl = Workload(
        kind="closed-loop",
        levels=(1, 64),
        max_tokens=256,
        prompt_tokens=1000,
        ignore_eos=True,
        duration_s=30,
        ramp_s=0,
    )
    one, many = (summarize(lv) for lv in simulate_sweep(pm, wl, noise=0))
    assert one.ttft_s_p50 == pytest.approx(pm.request_overhead_s + pm.prefill_s(1000), rel=0.05)
    assert many.ttft_s_p50 > one.ttft_s_p50
