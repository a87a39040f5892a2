"""Performance model of an SGLang server on a multi-GPU host.

Given a hardware profile, a model profile, SGLang's launch flags and the NCCL
environment, it answers three questions the serving simulation asks:

* the memory plan: weights per GPU, the KV pool that ``--mem-fraction-static``
  leaves, KV token capacity, the effective running-request cap; and whether the
  launch fails (SGLang's own OOM and CUDA-graph-capture messages);
* how long one decode iteration of a running batch takes;
* how long one prefill chunk takes.

Decode time is built from first principles per GPU on the critical path: bytes of
weights read (dense part, plus the distinct routed experts the batch touches:
``B`` tokens choosing ``k`` of ``E`` experts touch ``E*(1-(1-k/E)**B)``; under EP
the step waits for the busiest GPU's group), KV bytes read by attention, compute
where it binds, the all-reduces of tensor parallelism (see :mod:`tuner.sim.nccl`),
kernel-boundary overhead (far larger without CUDA graphs, when the CPU launches
every kernel), scheduler CPU time amortised by ``--num-continuous-decode-steps``
and hidden in part by the overlap scheduler, EPLB's statistics and rebalancing,
and pipeline hops. Every constant below says where its value comes from: a
datasheet or model card (via the profiles), SGLang's source, or "calibrated to"
a row of the reference table (see :mod:`tuner.sim.calibration`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from tuner import profiles
from tuner.engines import sglang
from tuner.engines.base import CUDA_GRAPH_MEM_KEY, KV_CACHE_KEY, MEMORY_LEFT_KEY
from tuner.failures import LaunchFailure
from tuner.profiles import HardwareProfile, KernelPath, ModelProfile
from tuner.sim import nccl

GIB = 2**30

# --- memory ---------------------------------------------------------------------------
#: SGLang's derived --mem-fraction-static on 96 GB cards with TP8 (DESIGN notes: ~0.88).
DEFAULT_MEM_FRACTION_STATIC = 0.88
#: CUDA-graph capture memory: a fixed pool plus a per-captured-batch-size slice (estimate,
#: bounded by two launches on 96 GB cards with Kimi K2.6: the reference config, TP8 with 256
#: captured sizes at NCCL defaults, fails capture at --mem-fraction-static 0.95; TP8 EP8 with
#: fp8 KV, --chunked-prefill-size 32768 and 512 captured sizes runs at 0.9).
CUDA_GRAPH_BASE_GIB = 2.0
CUDA_GRAPH_PER_BS_GIB = 0.0075
#: Prefill activation workspace per chunk token, in multiples of one hidden vector (estimate:
#: SGLang's fused-MoE buffer holds top-k (8) expert outputs per token and is reused across
#: layers; the residual stream, its normalised copy and the MLA projections at 1/tp of the
#: heads fit beside it in reused buffers). 24 put the 32768-token launch above at 10.5 GiB,
#: more than the 9.6 GiB that --mem-fraction-static 0.9 leaves, although it runs.
ACTIVATION_HIDDEN_MULTIPLE = 8
#: Bytes of one activation element (BF16).
ACTIVATION_BYTES = 2
#: SGLang caps max_running_requests at max_total_num_tokens // 2 (model_runner).
RUNNING_REQUESTS_PER_KV_TOKEN = 0.5
#: SGLang's max_running_requests when the flag is unset, before the KV cap (model_runner).
DEFAULT_MAX_RUNNING_REQUESTS = 2048

# --- decode kernels ---------------------------------------------------------------------
#: Achieved fraction of peak memory bandwidth for BF16 GEMV/GEMM weight streaming (typical
#: for well-tuned decode kernels; estimate).
DENSE_BANDWIDTH_EFFICIENCY = 0.80
#: Achieved bandwidth of the INT4/FP8 fused-MoE kernels at full expert width (estimate), and
#: the per-GPU expert width (intermediate columns) at which they reach half of it. TP8 slices
#: each 2048-wide expert into 256 columns, too narrow for full-width tiles. Calibrated to the
#: peak of TP8 (~1291 tok/s, tuned NCCL) against TP8+EP8 (~1500-1538 tok/s, NCCL defaults).
MOE_BANDWIDTH_EFFICIENCY = 0.92
MOE_HALF_EFFICIENCY_WIDTH = 128
#: Achieved bandwidth of MLA decode attention reading the latent KV cache (estimate).
ATTENTION_BANDWIDTH_EFFICIENCY = 0.85
#: Achieved fraction of dense tensor peak in large GEMMs (prefill; estimate).
COMPUTE_EFFICIENCY = 0.45
#: Kernel-boundary time per layer when the step replays a CUDA graph (~12 kernels per
#: layer at ~2-3 us each), for a kernel path the hardware profile does not list. The listed
#: paths carry their own fitted value (``kernel_paths`` in ``tuner/data/hardware``); this
#: one is the reference host's (calibrated to TP8 C=1 ~98 tok/s before paths were split).
GRAPH_OVERHEAD_US_PER_LAYER = 56.0
#: Routed-expert bytes per parameter at or below which the weights are a 4-bit format
#: (INT4 group-quantised: 0.5 + scales), and at or below which they are 8-bit.
INT4_MAX_BYTES_PER_PARAM = 0.75
FP8_MAX_BYTES_PER_PARAM = 1.25
#: CPU launch time per layer without CUDA graphs (eager PyTorch, ~12 kernels at ~40 us of
#: Python and launch each). Calibrated to "TP8 without CUDA graphs ~4x slower at C=1".
EAGER_LAUNCH_US_PER_LAYER = 670.0
#: Without CUDA graphs the CPU launch stream overlaps GPU work only in part: the eager forward
#: has host-device synchronisations (routing metadata, sampling) that serialise this share of
#: the shorter of the two (estimate; keeps eager mode ~10% behind graphs at large batch, where
#: launch time is otherwise hidden).
EAGER_SERIALISED_FRACTION = 0.3
#: Per-MoE-layer cost of SGLang's non-DeepEP expert-parallel path (token permutation,
#: masked grouped GEMM launch, un-permutation). Calibrated to TP8+EP8 C=1 ~65 tok/s (at NCCL
#: defaults, as measured).
EP_DISPATCH_US_PER_LAYER = 62.0
#: Real routers are skewed: the per-GPU count of touched experts varies more than uniform
#: routing predicts. Variance multiplier of the busiest-group estimate (estimate).
ROUTING_OVERDISPERSION = 2.0
#: Expected maximum of G independent standard normals (for the busiest of G EP groups).
_EXPECTED_MAX_NORMAL = {1: 0.0, 2: 0.5642, 4: 1.0294, 8: 1.4236, 16: 1.7660, 32: 2.0697, 64: 2.3344}

# --- scheduler --------------------------------------------------------------------------
#: CPU time of one scheduler iteration: fixed part and per running request (batch
#: bookkeeping, sampling post-processing, detokenizer hand-off; estimate).
SCHEDULER_BASE_US = 1500.0
SCHEDULER_PER_REQUEST_US = 12.0
#: Fraction of scheduler CPU time the overlap scheduler hides behind GPU work (estimate).
OVERLAP_HIDDEN_FRACTION = 0.7

# --- EPLB -------------------------------------------------------------------------------
#: Per-MoE-layer cost of EPLB's expert-distribution recording in every step: a
#: device-to-host synchronisation per layer, host-side work that overlaps the GPU's the way
#: eager kernel launches do (see EAGER_SERIALISED_FRACTION), so it crushes one stream and
#: hides in part behind the long steps of a large batch. Calibrated to "EP8 + EPLB: C=1
#: crushed ~8x" together with "peak ~40% below EP8".
EPLB_RECORD_US_PER_LAYER = 1900.0
#: SGLang's default --eplb-rebalance-num-iterations.
EPLB_REBALANCE_ITERATIONS = 1000
#: Share of each GPU's expert weights moved by one rebalance (estimate).
EPLB_MOVED_FRACTION = 0.25

# --- pipeline parallelism -----------------------------------------------------------------
#: Latency of one stage-to-stage activation send (P2P, small message; estimate).
PP_HOP_LATENCY_US = 30.0

# --- time to first token ------------------------------------------------------------------
#: Per-request latency outside the GPU forward, on the path of the first token: HTTP and
#: tokenization before the scheduler sees the request, detokenization and streaming of the
#: first token after. It runs in other processes, so it delays the request, not the batch.
#: Calibrated to the public C=1 TTFTs (``tuner/data/calibration/public.yaml``: 8x H200 Kimi
#: K2.5 and 8x B200 DeepSeek-R1, ~610-token prompts, 126-177 ms measured, of which the
#: model's prefill forward is ~40 ms).
REQUEST_OVERHEAD_S = 0.120

# --- first request ------------------------------------------------------------------------
#: Extra latency of the first request after start-up (JIT/Triton autotuning of shapes not
#: seen at capture; estimate). Warm-up requests absorb it.
FIRST_REQUEST_EXTRA_S = 3.0


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Per-GPU memory of a launch, in the terms SGLang logs at start-up."""

    gpu_memory_gib: float
    mem_fraction_static: float
    weights_gib_per_gpu: float
    kv_pool_gib: float
    kv_bytes_per_token: float
    kv_tokens: int
    max_running_requests: int
    requested_max_running_requests: int | None
    cuda_graph_max_bs: int
    cuda_graph_gib: float
    nccl_buffers_gib: float
    activation_gib: float
    headroom_gib: float
    chunked_prefill_size: int

    @property
    def available_gib(self) -> float:
        """Memory left per GPU once the CUDA graphs are captured (SGLang's ``avail mem`` at
        the end of capture): what is outside the static fraction less NCCL's buffers and the
        graphs. Prefill activations run in it; a launch whose activations do not fit fails."""
        return self.headroom_gib - self.nccl_buffers_gib - self.cuda_graph_gib

    def as_dict(self) -> dict[str, float | int | None]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    def memory_report(self) -> dict[str, float]:
        """The launch's memory under the keys a real server's log gives
        (:meth:`tuner.engines.base.Engine.memory_report`)."""
        report = {MEMORY_LEFT_KEY: round(self.available_gib, 2), KV_CACHE_KEY: round(self.kv_pool_gib, 2)}
        if self.cuda_graph_gib:
            report[CUDA_GRAPH_MEM_KEY] = round(self.cuda_graph_gib, 2)
        return report


@dataclass(frozen=True, slots=True)
class _Layout:
    """How the model is sharded on the GPUs of one pipeline stage."""

    layers: float
    moe_layers: float
    dense_layers: float
    attn_tp: int
    dense_tp: int
    tp: int
    moe_tp: int
    ep_groups: int
    dp: int
    pp: int


def weight_format(model: ModelProfile) -> str:
    """The routed experts' weight format (``int4``, ``fp8`` or ``bf16``), which selects the
    expert kernels of a kernel path."""
    b = model.precision.routed_expert_bytes_per_param
    if b <= INT4_MAX_BYTES_PER_PARAM:
        return "int4"
    return "fp8" if b <= FP8_MAX_BYTES_PER_PARAM else "bf16"


def kernel_path(hw: HardwareProfile, model: ModelProfile) -> tuple[str, KernelPath]:
    """The kernel path a launch runs on this hardware: its key and its step costs (the
    defaults of this module when the profile does not list the path)."""
    key = f"{weight_format(model)}/{hw.attention_backend}"
    default = KernelPath(graph_overhead_us_per_layer=GRAPH_OVERHEAD_US_PER_LAYER)
    return key, hw.kernel_paths.get(key, default)


def expected_busiest_experts(
    batch: float, experts: int, top_k: int, groups: int, overdispersion: float
) -> float:
    """Distinct experts the busiest of ``groups`` equal EP groups touches for ``batch`` tokens.

    With uniform routing each expert is touched with ``p = 1-(1-k/E)**B``; a group of
    ``m = E/G`` experts touches ``m*p`` on average with variance ``m*p*(1-p)`` (times the
    over-dispersion of real routing); the busiest group is approximated by the mean plus
    the expected maximum of ``G`` normals times the standard deviation.
    """
    p = 1.0 - (1.0 - top_k / experts) ** batch
    m = experts / groups
    mean = m * p
    if groups == 1:
        return mean
    sd = math.sqrt(m * p * (1.0 - p) * overdispersion)
    z = _EXPECTED_MAX_NORMAL.get(groups, math.sqrt(2 * math.log(groups)))
    return min(m, mean + z * sd)


class PerfModel:
    """Timing and memory of one launched configuration (see module docstring)."""

    def __init__(
        self,
        hw: HardwareProfile,
        model: ModelProfile,
        args: sglang.ServerArgs,
        env: Mapping[str, str] | None = None,
    ):
        self.hw = hw
        self.model = model
        self.args = sglang.validate(args, hw.gpu_count)
        self.nccl = nccl.resolve(env or {}, hw.interconnect)
        self.allreduce = nccl.AllReduceModel(self.nccl, hw.interconnect)
        self.layout = self._layout()
        self.path_key, self.path = kernel_path(hw, model)
        self.memory = self._memory_plan()
        self.first_request_extra_s = FIRST_REQUEST_EXTRA_S
        self.request_overhead_s = REQUEST_OVERHEAD_S
        self._graph_bs = self.memory.cuda_graph_max_bs if self.args.cuda_graph_enabled else 0
        self._base_cache: dict[int, tuple[float, float, float]] = {}

    @classmethod
    def build(
        cls, hardware: str, model: str, argv: Sequence[str] | str, env: Mapping[str, str] | None = None
    ) -> PerfModel:
        """Parse SGLang flags and build the model; raises :class:`LaunchFailure` on a launch
        SGLang would refuse (``invalid-args``), run out of memory at (``oom``,
        ``cuda-graph-oom``) or crash on."""
        return cls(profiles.hardware(hardware), profiles.model(model), sglang.parse_args(argv), env)

    # --- layout and memory ------------------------------------------------------------------
    def _layout(self) -> _Layout:
        a, m = self.args, self.model
        pp = a.pp_size
        dp = a.dp_size if a.enable_dp_attention else 1
        return _Layout(
            layers=m.layers / pp,
            moe_layers=m.moe_layers / pp,
            dense_layers=m.first_dense_layers / pp,
            attn_tp=max(1, a.tp_size // dp),
            dense_tp=a.moe_dense_tp_size or a.tp_size,
            tp=a.tp_size,
            moe_tp=a.moe_tp_size,
            ep_groups=a.ep_size,
            dp=dp,
            pp=pp,
        )

    def _dense_param_bytes(self) -> float:
        """Bytes per GPU of everything but routed experts, for one pipeline stage."""
        m, lay = self.model, self.layout
        ob = m.precision.other_bytes_per_param
        attn = lay.layers * m.attention_params_per_layer / lay.attn_tp
        dense_mlp = lay.dense_layers * 3 * m.hidden_size * m.dense_intermediate_size / lay.dense_tp
        shared = lay.moe_layers * (m.moe.shared_experts if m.moe else 0) * m.expert_params / lay.tp
        embed = m.embedding_params / lay.tp / lay.pp
        return (attn + dense_mlp + shared) * ob + embed * m.precision.embedding_bytes

    def _expert_bytes(self) -> float:
        return self.model.expert_params * self.model.precision.routed_expert_bytes_per_param

    def _memory_plan(self) -> MemoryPlan:
        a, m, gpu, lay = self.args, self.model, self.hw.gpu, self.layout
        routed = lay.moe_layers * (m.moe.routed_experts if m.moe else 0) * self._expert_bytes() / lay.tp
        weights = (self._dense_param_bytes() + routed) / GIB
        frac = a.mem_fraction_static or DEFAULT_MEM_FRACTION_STATIC
        kv_pool = gpu.memory_gib * frac - gpu.runtime_reserved_gib - weights
        kv_elem = 1.0 if a.kv_cache_dtype.startswith("fp8") else m.precision.kv_cache_bytes_per_element
        kv_per_token = m.kv_elements_per_gpu(lay.attn_tp) * kv_elem * lay.layers
        if kv_pool <= 0:
            raise LaunchFailure(
                "oom",
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={frac}",
            )
        kv_tokens = int(kv_pool * GIB / kv_per_token) * lay.dp
        cap = int(kv_tokens * RUNNING_REQUESTS_PER_KV_TOKEN)
        requested = a.max_running_requests
        running = min(requested or DEFAULT_MAX_RUNNING_REQUESTS, cap)
        # Under 60 GiB, where SGLang's releases disagree, those of the 60-160 GiB GPUs.
        defaults = sglang.memory_defaults(gpu.memory_gib, a.tp_size) or sglang.mid_range_memory_defaults(
            a.tp_size
        )
        graph_limit = a.cuda_graph_max_bs or defaults.cuda_graph_max_bs
        graph_bs = min(graph_limit, running) if a.cuda_graph_enabled else 0
        graph_gib = (CUDA_GRAPH_BASE_GIB + CUDA_GRAPH_PER_BS_GIB * graph_bs) if graph_bs else 0.0
        chunk = a.chunked_prefill_size or defaults.chunked_prefill_size
        if chunk < 0:
            chunk = 1 << 20  # chunking disabled: the whole prompt batch at once
        act = min(chunk, 65536) * m.hidden_size * ACTIVATION_BYTES * ACTIVATION_HIDDEN_MULTIPLE / GIB
        nccl_gib = self.nccl.buffers_gib()
        headroom = gpu.memory_gib * (1 - frac)
        plan = MemoryPlan(
            gpu_memory_gib=gpu.memory_gib,
            mem_fraction_static=frac,
            weights_gib_per_gpu=weights,
            kv_pool_gib=kv_pool,
            kv_bytes_per_token=kv_per_token,
            kv_tokens=kv_tokens,
            max_running_requests=running,
            requested_max_running_requests=requested,
            cuda_graph_max_bs=graph_bs,
            cuda_graph_gib=graph_gib,
            nccl_buffers_gib=nccl_gib,
            activation_gib=act,
            headroom_gib=headroom,
            chunked_prefill_size=chunk,
        )
        if graph_gib and headroom < nccl_gib + act + graph_gib:
            raise LaunchFailure(
                "cuda-graph-oom",
                "Exception: Capture cuda graph failed: CUDA out of memory. "
                f"Tried to allocate {graph_gib:.2f} GiB with {headroom - nccl_gib - act:.2f} GiB left. "
                "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
                "3. disable torch compile by not using --enable-torch-compile\n"
                "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
            )
        if headroom < nccl_gib + act:
            raise LaunchFailure(
                "oom",
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {act:.2f} GiB "
                "(prefill workspace during warm-up; lower --mem-fraction-static or --chunked-prefill-size)",
            )
        return plan

    # --- decode -----------------------------------------------------------------------------
    def _forward_parts(self, b: float) -> tuple[float, float, float]:
        """(GPU seconds excluding KV reads, CPU launch seconds if eager, fixed per-step seconds)
        of one forward of ``b`` tokens through one pipeline stage."""
        m, gpu, lay, a = self.model, self.hw.gpu, self.layout, self.args
        bw = gpu.memory_bandwidth_gbs * 1e9
        flops = gpu.dense_tflops.get(m.precision.compute, gpu.dense_tflops["bf16"]) * 1e12
        eff_flops = flops * COMPUTE_EFFICIENCY
        # Dense part: weights are read once per forward whatever the batch.
        dense_bytes = self._dense_param_bytes()
        dense_params = dense_bytes / m.precision.other_bytes_per_param
        t_dense = max(dense_bytes / (bw * DENSE_BANDWIDTH_EFFICIENCY), 2 * b * dense_params / eff_flops)
        tokens_per_rank = b / lay.dp if lay.dp > 1 else b
        t_moe = self._moe_seconds(b, bw, eff_flops) if m.moe else 0.0
        # Communication: all-reduce after attention and after the MLP/MoE in every layer.
        msg = tokens_per_rank * m.hidden_size * ACTIVATION_BYTES
        ar = self.allreduce.seconds
        t_comm = lay.layers * ar(msg, lay.attn_tp) if lay.attn_tp > 1 else 0.0
        dense_ar = ar(msg, lay.dense_tp) if lay.dense_tp > 1 else 0.0
        if lay.dp > 1:
            # DP attention: tokens are gathered for the MoE and scattered back (~one all-reduce).
            dense_ar = ar(b * m.hidden_size * ACTIVATION_BYTES, lay.tp)
        t_comm += lay.dense_layers * dense_ar
        if a.moe_a2a_backend == "deepep":
            a2a = ar(b * m.hidden_size * ACTIVATION_BYTES, lay.tp) * self.hw.interconnect.deepep_penalty
            t_comm += lay.moe_layers * 2 * a2a
        else:
            t_comm += lay.moe_layers * (ar(msg, lay.tp) if lay.tp > 1 else 0.0)
        if lay.ep_groups > 1 and a.moe_a2a_backend != "deepep":
            t_comm += lay.moe_layers * EP_DISPATCH_US_PER_LAYER * 1e-6
        gpu_s = t_dense + t_moe + t_comm
        eager_cpu = lay.layers * EAGER_LAUNCH_US_PER_LAYER * 1e-6
        graph_overhead = lay.layers * self.path.graph_overhead_us_per_layer * 1e-6
        fixed = 0.0
        if a.enable_eplb and m.moe:
            moved = (
                EPLB_MOVED_FRACTION * lay.moe_layers * m.moe.routed_experts * self._expert_bytes() / lay.tp
            )
            fixed += moved / (self.hw.interconnect.p2p_gbs * 1e9) / EPLB_REBALANCE_ITERATIONS
        return gpu_s + graph_overhead, eager_cpu, fixed

    def _eplb_record_s(self) -> float:
        """Host time of EPLB's per-layer expert-count recording in one forward (0 without EPLB)."""
        if not self.args.enable_eplb or not self.model.moe:
            return 0.0
        return self.layout.moe_layers * EPLB_RECORD_US_PER_LAYER * 1e-6

    def _moe_seconds(self, b: float, bw: float, eff_flops: float) -> float:
        """Routed-expert time of one forward of ``b`` tokens: the busiest EP group's distinct
        experts, each 1/moe_tp of it, read (or computed) in every MoE layer."""
        m, lay, a = self.model, self.layout, self.args
        assert m.moe is not None
        busiest = expected_busiest_experts(
            b,
            m.moe.routed_experts,
            m.moe.experts_per_token,
            lay.ep_groups,
            1.0 if a.enable_eplb else ROUTING_OVERDISPERSION,
        )
        width = m.moe.expert_intermediate_size / lay.moe_tp
        eff_moe = MOE_BANDWIDTH_EFFICIENCY * width / (width + MOE_HALF_EFFICIENCY_WIDTH)
        moe_bytes = busiest * self._expert_bytes() / lay.moe_tp
        pairs = b * m.moe.experts_per_token / lay.ep_groups
        moe_flops = 2 * pairs * m.expert_params / lay.moe_tp
        return lay.moe_layers * max(moe_bytes / (bw * eff_moe), moe_flops / eff_flops)

    def _kv_seconds_per_token(self) -> float:
        """Seconds of attention per cached context token in one decode step (one stage),
        when the batch is large enough for the kernel to stream KV at full bandwidth."""
        bw = self.hw.gpu.memory_bandwidth_gbs * 1e9 * ATTENTION_BANDWIDTH_EFFICIENCY
        return self.memory.kv_bytes_per_token / bw / self.layout.dp

    def _serial_attention_seconds_per_token(self) -> float:
        """Seconds of one sequence's decode attention per cached token (all layers of a stage)
        on this kernel path: the floor when few sequences cannot fill the GPU."""
        return self.path.attention_ns_per_token_per_layer * 1e-9 * self.layout.layers

    def _decode_base(self, batch: int) -> tuple[float, float, float]:
        """(GPU s without KV, eager CPU launch s or 0, fixed s) of a decode iteration of ``batch``."""
        hit = self._base_cache.get(batch)
        if hit is not None:
            return hit
        lay, a = self.layout, self.args
        micro = max(1.0, batch / lay.pp)  # pipeline micro-batches: one per stage
        gpu_s, eager_cpu, fixed = self._forward_parts(micro)
        if 0 < batch <= self._graph_bs:
            eager_cpu = 0.0  # graph replay: the CPU launches one graph, not every kernel
        eager_cpu += self._eplb_record_s()
        hops = 0.0
        if lay.pp > 1:
            msg = micro * self.model.hidden_size * ACTIVATION_BYTES
            hops = (lay.pp - 1) * (PP_HOP_LATENCY_US * 1e-6 + msg / (self.hw.interconnect.p2p_gbs * 1e9))
        sched = (SCHEDULER_BASE_US + SCHEDULER_PER_REQUEST_US * batch) * 1e-6 / a.num_continuous_decode_steps
        if a.overlap_schedule:
            sched *= 1.0 - OVERLAP_HIDDEN_FRACTION
        # A full pipeline cycle gives every running request one token: pp stage-forwards.
        out = (gpu_s * lay.pp, eager_cpu * lay.pp, fixed + hops + sched)
        self._base_cache[batch] = out
        return out

    def decode_step_s(self, batch: int, context_tokens: float | np.ndarray) -> float | np.ndarray:
        """Seconds of one decode iteration: every running request gets one token.

        ``context_tokens`` is the total KV length of the running batch (scalar or array of
        candidates, for vectorised simulation).
        """
        if batch <= 0:
            return 0.0
        gpu_s, eager_cpu, fixed = self._decode_base(batch)
        # Attention: KV streaming over the whole batch, or the longest sequence's serial
        # attention on this kernel path (context per sequence), whichever binds.
        attention = np.maximum(
            self._kv_seconds_per_token() * context_tokens,
            self._serial_attention_seconds_per_token() * context_tokens / batch,
        )
        gpu = gpu_s + attention
        if eager_cpu:
            gpu = np.maximum(gpu, eager_cpu) + EAGER_SERIALISED_FRACTION * np.minimum(gpu, eager_cpu)
        return gpu + fixed

    # --- prefill ----------------------------------------------------------------------------
    def _prefill_attention_flops(self, tokens: int) -> float:
        """FLOPs per GPU of prefill attention over a chunk of ``tokens`` new tokens of one
        sequence (causal: each token attends to the ones before it, ``tokens**2 / 2`` pairs).

        MLA prefill runs as ordinary multi-head attention on decompressed keys and values:
        per pair and head, ``2*(qk_nope + qk_rope)`` FLOPs for the score and ``2*v_head`` for
        the weighted sum; grouped-query attention the same with ``head_dim`` for both (its
        KV sharing saves memory, not FLOPs). A chunk holding several short prompts is counted as one sequence
        (an upper bound); a long prompt's later chunks also attend to its earlier ones (left
        out): the two errors pull opposite ways and both are small below ~8k tokens.
        """
        a, lay = self.model.attention, self.layout
        if a.kind == "mla":
            qk, v = a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim
        else:
            qk = v = a.head_dim
        per_pair = 2 * (qk + v) * a.heads
        return per_pair * tokens * tokens / 2 * lay.layers / lay.attn_tp

    @lru_cache(maxsize=512)  # noqa: B019 - one model per launch; bounded
    def prefill_s(self, tokens: int) -> float:
        """Seconds of one prefill forward over ``tokens`` new tokens (a chunk), all stages:
        the active parameters' GEMMs and the attention, or the weights read, whichever binds."""
        if tokens <= 0:
            return 0.0
        m, gpu, lay = self.model, self.hw.gpu, self.layout
        flops = (
            gpu.dense_tflops.get(m.precision.compute, gpu.dense_tflops["bf16"]) * 1e12 * COMPUTE_EFFICIENCY
        )
        active = m.active_params / lay.tp / lay.pp
        t_compute = (2 * tokens * active + self._prefill_attention_flops(tokens)) / flops
        gpu_s, eager_cpu, fixed = self._forward_parts(float(tokens))
        stage = max(gpu_s, t_compute, eager_cpu + self._eplb_record_s())
        return stage * lay.pp + fixed + SCHEDULER_BASE_US * 1e-6

    # --- descriptions -----------------------------------------------------------------------
    def allreduce_share(self, batch: int) -> float:
        """Fraction of a decode step spent in collectives (for the physics checks)."""
        lay, m = self.layout, self.model
        msg = batch * m.hidden_size * ACTIVATION_BYTES
        per_layer = (self.allreduce.seconds(msg, lay.attn_tp) if lay.attn_tp > 1 else 0.0) + (
            self.allreduce.seconds(msg, lay.tp) if lay.tp > 1 else 0.0
        )
        return float(lay.layers * lay.pp * per_layer / self.decode_step_s(batch, 0.0))

    def server_info(self) -> dict[str, object]:
        a = self.args
        return {
            "label": a.label(),
            "tp_size": a.tp_size,
            "ep_size": a.ep_size,
            "pp_size": a.pp_size,
            "dp_size": a.dp_size,
            "cuda_graph": a.cuda_graph_enabled,
            "num_continuous_decode_steps": a.num_continuous_decode_steps,
            **self.memory.as_dict(),
            **self.memory.memory_report(),
            "nccl": {
                "protocols": list(self.nccl.allowed_protocols),
                "algorithm": self.nccl.algorithm,
                "channels": self.nccl.channels,
                "nthreads": self.nccl.nthreads,
                "buffsize": self.nccl.buffsize,
                "p2p": self.nccl.p2p,
            },
        }
