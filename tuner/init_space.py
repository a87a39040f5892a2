"""``tuner init``: a commented search space that fits one model on one host.

A hand-written space encodes what a person learnt about their box: which layouts hold the
weights, which knobs matter on their interconnect, what batch the KV pool admits. This
module derives the same from the two profiles, with the simulator's memory plan as the
judge:

* layouts (TP, TP x PP, DP attention for MLA models) are kept only where the weights fit
  at some ``--mem-fraction-static`` the plan accepts (weights, KV pool, CUDA-graph and
  activation headroom); a model that fits no layout is an error with the numbers;
* expert parallelism, EPLB and a dense-TP choice only for models with experts; DeepEP
  only on NVLink hosts (it needs NVLink/NVSHMEM; on PCIe it loses to NCCL);
* NCCL variables of the fabric: protocol, channels, threads, buffers and P2P on PCIe;
  algorithm (NVLS on NVSwitch), protocol and channels on NVLink;
* the mem-fraction range is where the plan launches, and the max-running-requests choices
  bracket what the KV pool admits for the workload's request length;
* start points: the engine's defaults for the best layouts, then the simulator's best
  predictions (:func:`tuner.warmstart.predicted_top`), each checked to launch.

The result is a plain space file: ``tuner search --space FILE`` takes it as written.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from tuner.engines import sglang
from tuner.errors import UsageError
from tuner.failures import LaunchFailure
from tuner.profiles import HardwareProfile, ModelProfile
from tuner.sim.model import DEFAULT_MEM_FRACTION_STATIC, PerfModel
from tuner.space import Space
from tuner.start_points import fits

#: Fractions of GPU memory the scan tries for ``--mem-fraction-static`` (SGLang accepts (0, 1);
#: below 0.60 the pool wastes most of the card, above 0.95 no card keeps graph headroom).
FRACTION_LOW, FRACTION_HIGH, FRACTION_STEP = 0.60, 0.95, 0.01
#: Widest mem-fraction range the space keeps (the reference space tunes 0.80-0.94).
FRACTION_SPAN = 0.14
#: vLLM's default ``--gpu-memory-utilization`` (vLLM engine args).
VLLM_DEFAULT_UTILIZATION = 0.9
#: Running-request caps offered, filtered by what the KV pool admits.
RUNNING_CHOICES = (16, 32, 64, 128, 192, 256, 384, 512, 768, 1024)
#: Concurrency of the sweep's peak level when the KV pool admits it (the reference sweep's).
PEAK_LEVEL = 256
#: Prompt tokens assumed per request when the workload leaves prompts short (chat prompts).
SHORT_PROMPT_TOKENS = 256
#: Start points from the engine's defaults (best layouts first) and from the simulator.
DEFAULT_STARTS = 3
PREDICTED_STARTS = 3
#: Simulator predictions spent on the warm start (each a noise-free simulated sweep).
DEFAULT_PREDICTIONS = 120
#: Width of the comment lines in the written file (the project's line length).
COMMENT_WIDTH = 100


class NoFit(UsageError):
    """The model fits no layout of the host: the message carries the memory numbers."""


@dataclass(slots=True)
class Layout:
    """One way to place the model on the host, and what the memory plan says of it."""

    name: str
    tp: int
    pp: int = 1
    dp_attention: int = 0
    #: Fractions (x100) at which the plan launches.
    fractions: list[int] = field(default_factory=list)
    weights_gib: float = 0.0
    failure: str = ""

    @property
    def sglang_flags(self) -> dict[str, Any]:
        flags: dict[str, Any] = {"--tp-size": self.tp}
        if self.pp > 1:
            flags["--pp-size"] = self.pp
        if self.dp_attention:
            flags.update({"--dp-size": self.dp_attention, "--enable-dp-attention": True})
        return flags

    @property
    def vllm_flags(self) -> dict[str, Any]:
        flags: dict[str, Any] = {"--tensor-parallel-size": self.tp}
        if self.pp > 1:
            flags["--pipeline-parallel-size"] = self.pp
        return flags

    @property
    def fits(self) -> bool:
        return bool(self.fractions)

    def argv(self, fraction: float) -> list[str]:
        argv: list[str] = []
        for flag, value in self.sglang_flags.items():
            argv += [flag] if value is True else [flag, str(value)]
        return [*argv, "--mem-fraction-static", f"{fraction:.2f}"]


def candidate_layouts(model: ModelProfile, hw: HardwareProfile) -> list[Layout]:
    """Layouts over all of the host's GPUs: TP, TP x PP, and DP attention for MLA models.
    Attention TP must divide the query heads (SGLang and vLLM shard heads evenly)."""
    n = hw.gpu_count
    out = []
    for pp in (d for d in range(1, n + 1) if n % d == 0):
        tp = n // pp
        if pp > model.layers or model.attention.heads % tp:
            continue
        name = f"tp{tp}" if pp == 1 else (f"pp{pp}" if tp == 1 else f"tp{tp}pp{pp}")
        out.append(Layout(name, tp, pp))
    if model.attention.kind == "mla" and n > 1:
        out.insert(1, Layout(f"tp{n}_dpattn{n}", n, 1, n))
    return out


def _plan(model: ModelProfile, hw: HardwareProfile, argv: Sequence[str], env: dict[str, str] | None = None):
    return PerfModel(hw, model, sglang.parse_args(list(argv)), env or {})


def scan(model: ModelProfile, hw: HardwareProfile) -> list[Layout]:
    """Every candidate layout with the fractions at which its memory plan launches."""
    layouts = candidate_layouts(model, hw)
    steps = round((FRACTION_HIGH - FRACTION_LOW) / FRACTION_STEP)
    for lay in layouts:
        for i in range(steps + 1):
            pct = round(FRACTION_LOW * 100) + i
            try:
                pm = _plan(model, hw, lay.argv(pct / 100))
            except LaunchFailure as exc:
                lay.failure = exc.message.splitlines()[0]  # the last: at the highest fraction
                continue
            lay.fractions.append(pct)
            lay.weights_gib = pm.memory.weights_gib_per_gpu
        if not lay.fits:
            lay.weights_gib = _weights_gib(model, hw, lay)
    return layouts


def _weights_gib(model: ModelProfile, hw: HardwareProfile, lay: Layout) -> float:
    """Per-GPU weights of a layout that does not launch (the plan's own arithmetic, at a
    fraction that leaves room for any checkpoint so the plan gets that far)."""
    big = hw.model_copy(update={"gpu": hw.gpu.model_copy(update={"memory_gib": 1e9})})
    return _plan(model, big, lay.argv(0.5)).memory.weights_gib_per_gpu


def no_fit_message(model: ModelProfile, hw: HardwareProfile, layouts: Sequence[Layout]) -> str:
    best = min(layouts, key=lambda lay: lay.weights_gib) if layouts else None
    total_gb = model.weight_bytes / 1e9
    parts = [
        f"{model.name} does not fit {hw.name}: {total_gb:.0f} GB of weights "
        f"({model.total_params / 1e9:.0f}B parameters, "
        f"{model.precision.weight_format or model.precision.compute})"
    ]
    if best is not None:
        usable = hw.gpu.memory_gib * FRACTION_HIGH - hw.gpu.runtime_reserved_gib
        parts.append(
            f"the smallest share per GPU is {best.weights_gib:.1f} GiB ({best.name}), and a "
            f"{hw.gpu.memory_gib:.1f} GiB GPU holds at most {usable:.1f} GiB of weights and KV cache at "
            f"mem-fraction {FRACTION_HIGH}" + (f" ({best.failure})" if best.failure else "")
        )
    return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class InitOptions:
    engine: str = "sglang"
    objective: str = "peak"
    workload: str = "burst"
    model_path: str | None = None
    name: str | None = None
    #: Simulator predictions spent on the warm start (0: none).
    predictions: int = DEFAULT_PREDICTIONS
    port: int = 30000


@dataclass(slots=True)
class _Param:
    name: str
    spec: dict[str, Any]
    comment: str


def _flow(value: Any) -> str:
    """``value`` as one line of YAML (flow style; no document-end marker after scalars)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False).strip()
    return text.removesuffix("...").strip()


def _wrap(text: str, indent: str) -> list[str]:
    """Comment lines of at most :data:`COMMENT_WIDTH` characters."""
    out = []
    for para in text.splitlines():
        out += textwrap.wrap(para, COMMENT_WIDTH - len(indent) - 2) or [""]
    return [f"{indent}# {line}".rstrip() for line in out]


def _default_fraction(lay: Layout) -> int:
    """SGLang's derived default where the plan launches there, else the nearest that does."""
    want = round(DEFAULT_MEM_FRACTION_STATIC * 100)
    return min(lay.fractions, key=lambda p: (abs(p - want), -p))


@dataclass(slots=True)
class SpaceDraft:
    """The space as a document plus the comments that explain each part."""

    doc: dict[str, Any]
    params: list[_Param]
    header: list[str]
    layouts: list[Layout]
    start_comments: list[str]

    def yaml_text(self) -> str:
        d = self.doc
        out = _wrap("\n".join(self.header), "")
        for key in ("name", "engine", "description", "hardware", "model"):
            out.append(f"{key}: {_flow(d[key])}")
        out.append("")
        out.append("launch:")
        out.append(f"  command: {_flow(d['launch']['command'])}")
        out.append("  flags:")
        for flag, value in d["launch"]["flags"].items():
            out.append(f"    {flag}: {_flow(value)}")
        out.append("  env: {}")
        out.append("")
        out.append("parameters:")
        for p in self.params:
            out += _wrap(p.comment, "  ")
            spec = dict(p.spec)
            choices = spec.get("choices")
            if isinstance(choices, dict):
                out.append(f"  {p.name}:")
                for k, v in spec.items():
                    if k != "choices":
                        out.append(f"    {k}: {_flow(v)}")
                out.append("    choices:")
                for cname, bundle in choices.items():
                    out.append(f"      {cname}: {_flow(bundle)}")
            else:
                out.append(f"  {p.name}: {_flow(spec)}")
            out.append("")
        if d.get("constraints"):
            out.append("constraints:")
            for c in d["constraints"]:
                out.append(f"  - expr: {_flow(c['expr'])}")
                out.append(f"    reason: {_flow(c['reason'])}")
            out.append("")
        out.append("workload:")
        for k, v in d["workload"].items():
            out.append(f"  {k}: {_flow(v)}")
        out.append("")
        out.append("objective:")
        out.append(f"  name: {d['objective']['name']}")
        out.append("")
        out += _wrap("\n".join(self.start_comments), "")
        out.append("start:")
        for point in d["start"]:
            out.append(f"  - {_flow(point)}")
        return "\n".join(out) + "\n"


def _running_choices(kv_requests: float, peak: int) -> list[int]:
    keep = [c for c in RUNNING_CHOICES if c <= max(2 * kv_requests, peak)]
    return keep[-5:] if len(keep) > 5 else keep


def _ep_constraint(layouts: Sequence[Layout], eps: Sequence[int]) -> str:
    terms = []
    for e in eps:
        ok = [lay.name for lay in layouts if lay.tp % e == 0]
        names = ", ".join(repr(n) for n in ok) + ("," if len(ok) == 1 else "")
        terms.append(f"(ep_size == {e} and layout in ({names}))")
    return "ep_size == 1 or " + " or ".join(terms)


def draft(
    model: ModelProfile,
    hw: HardwareProfile,
    *,
    model_ref: str,
    hardware_ref: str,
    options: InitOptions = InitOptions(),
) -> SpaceDraft:
    """The space for ``model`` on ``hw`` (profiles referenced in the file as ``*_ref``)."""
    if options.engine not in ("sglang", "vllm"):
        raise UsageError(f"--engine must be sglang or vllm, not {options.engine!r}")
    layouts = scan(model, hw)
    fitting = [lay for lay in layouts if lay.fits]
    if not fitting:
        raise NoFit(no_fit_message(model, hw, layouts))
    if options.engine == "vllm":
        fitting = [lay for lay in fitting if not lay.dp_attention]
    hi = max(max(lay.fractions) for lay in fitting)
    lo = max(min(min(lay.fractions) for lay in fitting), hi - round(FRACTION_SPAN * 100))
    best = max(fitting, key=lambda lay: (lay.pp == 1, -lay.weights_gib))
    start_frac = _default_fraction(best)
    pm = _plan(model, hw, best.argv(start_frac / 100))
    per_request = SHORT_PROMPT_TOKENS + 1024
    kv_requests = pm.memory.kv_tokens / per_request
    peak = max((c for c in (32, 64, 128, 192, PEAK_LEVEL) if c <= kv_requests), default=32)
    nvlink = hw.interconnect.kind == "nvlink"
    moe = model.moe
    sg = options.engine == "sglang"
    params: list[_Param] = []
    not_fit = [lay for lay in layouts if not lay.fits]
    layout_note = "; ".join(f"{lay.name} {lay.weights_gib:.1f} GiB/GPU" for lay in fitting) + (
        "; left out (weights do not fit): "
        + ", ".join(f"{lay.name} {lay.weights_gib:.1f} GiB" for lay in not_fit)
        if not_fit
        else ""
    )
    params.append(
        _Param(
            "layout",
            {
                "type": "categorical",
                "choices": {
                    lay.name: {"flags": lay.sglang_flags if sg else lay.vllm_flags} for lay in fitting
                },
            },
            f"Layouts whose weights fit ({hw.gpu.memory_gib:.1f} GiB per GPU): {layout_note}.\n"
            "TP splits every layer (two all-reduces per layer); PP splits layers into stages "
            "(point-to-point only, with pipeline bubbles)"
            + (
                "; DP attention keeps MLA's small KV per rank and gathers tokens for the experts."
                if any(lay.dp_attention for lay in fitting)
                else "."
            ),
        )
    )
    constraints: list[dict[str, str]] = []
    if moe and sg:
        eps = [
            e
            for e in (2, 4, 8, 16, 32, 64)
            if e <= max(lay.tp for lay in fitting) and moe.routed_experts % e == 0
        ]
        if eps:
            params.append(
                _Param(
                    "ep_size",
                    {"flag": "--ep-size", "type": "categorical", "choices": [1, *eps]},
                    f"Expert parallelism: whole experts per GPU ({moe.routed_experts} experts, top-"
                    f"{moe.experts_per_token}) instead of 1/tp slices: slower for one stream, faster "
                    "at peak. Must divide tp (constraint below).",
                )
            )
            constraints.append(
                {"expr": _ep_constraint(fitting, eps), "reason": "ep_size must divide the layout's tp size"}
            )
            params.append(
                _Param(
                    "enable_eplb",
                    {"flag": "--enable-eplb", "type": "bool", "when": "ep_size > 1"},
                    "EPLB moves hot experts between EP ranks; its statistics and weight moves cost "
                    + ("little over NVLink." if nvlink else "a lot over PCIe."),
                )
            )
        if model.first_dense_layers or moe.shared_experts:
            params.append(
                _Param(
                    "moe_dense_tp_size",
                    {"flag": "--moe-dense-tp-size", "type": "categorical", "choices": [None, 1]},
                    "Dense layers and shared experts without TP (1) save their all-reduces and "
                    "cost memory; SGLang accepts only null, 1 or tp.",
                )
            )
        if nvlink and eps:
            params.append(
                _Param(
                    "moe_a2a_backend",
                    {"flag": "--moe-a2a-backend", "type": "categorical", "choices": ["none", "deepep"]},
                    "DeepEP all-to-all over NVLink (forces ep = tp); left out on PCIe hosts, where it "
                    "loses to NCCL.",
                )
            )
            params.append(
                _Param(
                    "deepep_mode",
                    {
                        "flag": "--deepep-mode",
                        "type": "categorical",
                        "choices": ["auto", "low_latency"],
                        "when": "moe_a2a_backend == 'deepep'",
                    },
                    "low_latency keeps CUDA graphs; normal mode (left out) disables them.",
                )
            )
    elif moe and not sg:
        params[0].spec["choices"].update(
            {
                f"{lay.name}_ep": {"flags": {**lay.vllm_flags, "--enable-expert-parallel": True}}
                for lay in fitting
                if lay.pp == 1
            }
        )
        params.append(
            _Param(
                "enable_eplb",
                {
                    "flag": "--enable-eplb",
                    "type": "bool",
                    "when": "layout in ("
                    + ", ".join(repr(f"{lay.name}_ep") for lay in fitting if lay.pp == 1)
                    + ",)",
                },
                "Expert-parallel load balancing (needs expert parallelism).",
            )
        )
    running_flag = "--max-running-requests" if sg else "--max-num-seqs"
    params.append(
        _Param(
            "max_running_requests" if sg else "max_num_seqs",
            {
                "flag": running_flag,
                "type": "categorical",
                "choices": [None, *_running_choices(kv_requests, peak)],
            },
            f"Running-request cap. The KV pool of {best.name} at mem-fraction {start_frac / 100:.2f} holds "
            f"{pm.memory.kv_tokens:,} tokens ({pm.memory.kv_bytes_per_token / 1024:.0f} KiB per token), "
            f"~{kv_requests:.0f} requests of {per_request} tokens; null = the engine derives it.",
        )
    )
    if sg:
        params.append(
            _Param(
                "num_continuous_decode_steps",
                {"flag": "--num-continuous-decode-steps", "type": "categorical", "choices": [1, 2, 4, 8]},
                "Decode steps per scheduler round: amortises scheduler CPU time, delays admission (TTFT).",
            )
        )
        params.append(
            _Param(
                "cuda_graph_max_bs",
                {"flag": "--cuda-graph-max-bs", "type": "categorical", "choices": [None, 128, 256, 512]},
                "Largest captured decode batch: larger covers the peak, capture takes memory from the "
                "KV pool.",
            )
        )
    params.append(
        _Param(
            "mem_fraction_static" if sg else "gpu_memory_utilization",
            {
                "flag": "--mem-fraction-static" if sg else "--gpu-memory-utilization",
                "type": "float",
                "low": lo / 100,
                "high": hi / 100,
                "step": FRACTION_STEP,
            },
            f"Share of GPU memory for weights + KV: the memory plan launches between {lo / 100:.2f} "
            f"and {hi / 100:.2f} here (below: no KV room; above: no room for CUDA graphs, "
            "activations and NCCL buffers).",
        )
    )
    params.append(
        _Param(
            "kv_cache_dtype",
            {
                "flag": "--kv-cache-dtype",
                "type": "categorical",
                "choices": ["auto" if sg else None, "fp8_e4m3" if sg else "fp8"],
            },
            "FP8 KV cache halves the bytes per token: more running requests, some accuracy cost.",
        )
    )
    if hw.gpu_count > 1:
        params += _nccl_params(hw)
        constraints.append(
            {
                "expr": "nccl_min_nchannels is None or nccl_max_nchannels is None "
                "or nccl_min_nchannels <= nccl_max_nchannels",
                "reason": "NCCL_MIN_NCHANNELS above NCCL_MAX_NCHANNELS",
            }
        )
    workload = {"kind": options.workload, "levels": [1, peak], "max_tokens": 1024, "single_max_tokens": 128}
    name = options.name or f"{model.id}-{hw.id}"
    model_path = options.model_path or f"/models/{model.name}"
    command = (
        ["python3", "-m", "sglang.launch_server"]
        if sg
        else ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    )
    flags: dict[str, Any] = (
        {
            "--model-path": model_path,
            "--trust-remote-code": True,
            "--host": "127.0.0.1",
            "--port": options.port,
        }
        if sg
        else {
            "--model": model_path,
            "--trust-remote-code": True,
            "--host": "127.0.0.1",
            "--port": options.port,
        }
    )
    frac_name = "mem_fraction_static" if sg else "gpu_memory_utilization"
    starts: list[dict[str, Any]] = []
    for lay in sorted(fitting, key=lambda lay: (lay.pp, -len(lay.fractions)))[:DEFAULT_STARTS]:
        frac = _default_fraction(lay) if sg else min(lay.fractions, key=lambda p: abs(p - 90))
        frac = min(max(frac, lo), hi)
        starts.append({"layout": lay.name, frac_name: frac / 100})
    doc = {
        "name": name,
        "engine": options.engine,
        "description": f"{model.name} on {hw.name}, written by tuner init from the model and host profiles.",
        "hardware": hardware_ref,
        "model": model_ref,
        "launch": {"command": command, "flags": flags, "env": {}},
        "parameters": {p.name: p.spec for p in params},
        "constraints": constraints,
        "workload": workload,
        "objective": {"name": options.objective},
        "start": starts,
    }
    header = [
        f"{model.name} on {hw.name}, served by {'SGLang' if sg else 'vLLM'}: written by `tuner init`.",
        "",
        f"Model: {model.total_params / 1e9:.1f}B parameters ({model.active_params / 1e9:.1f}B active), "
        f"{model.attention.kind.upper()} attention"
        + (f", {moe.routed_experts} experts top-{moe.experts_per_token}" if moe else ", dense")
        + f", {model.precision.weight_format or model.precision.compute} weights "
        f"(~{model.weight_bytes / 1e9:.0f} GB).",
        f"Host: {hw.gpu_count}x {hw.gpu.name}, {hw.gpu.memory_gib:.1f} GiB each, "
        + ("NVLink." if nvlink else f"PCIe ({hw.interconnect.topology_path} between the farthest GPUs)."),
        "",
        f"  tuner search --space THIS_FILE --budget 20{'' if sg else ' --backend local'}",
        "",
        "Edit freely: every part below is an ordinary space file (see search_spaces/).",
    ]
    start_comments = [
        "Measured first: the engine's defaults on the best layouts"
        + (
            ", then the simulator's best predictions for this host."
            if sg
            else " (the simulator models SGLang only: no predicted start points)."
        ),
    ]
    return SpaceDraft(doc, params, header, fitting, start_comments)


def _nccl_params(hw: HardwareProfile) -> list[_Param]:
    link = hw.interconnect
    if link.kind == "nvlink":
        return [
            _Param(
                "nccl_algo",
                {"env": "NCCL_ALGO", "type": "categorical", "choices": [None, "Ring", "Tree", "NVLS"]},
                "NCCL algorithm: NVLS (NVLink SHARP) offloads all-reduce to the NVSwitch; "
                "null = NCCL decides.",
            ),
            _Param(
                "nccl_proto",
                {"env": "NCCL_PROTO", "type": "categorical", "choices": [None, "LL", "LL128", "Simple"]},
                "Protocol: LL has the lowest latency for small decode all-reduces "
                f"(~{link.latency_us['LL']:g} us here), LL128/Simple the bandwidth for prefill.",
            ),
            _Param(
                "nccl_min_nchannels",
                {"env": "NCCL_MIN_NCHANNELS", "type": "categorical", "choices": [None, 8, 16, 32]},
                f"Channels: more move big messages faster and take SMs (default {link.default_channels}).",
            ),
            _Param(
                "nccl_max_nchannels",
                {"env": "NCCL_MAX_NCHANNELS", "type": "categorical", "choices": [None, 16, 32]},
                "Upper bound on channels.",
            ),
        ]
    params = [
        _Param(
            "nccl_proto",
            {"env": "NCCL_PROTO", "type": "categorical", "choices": [None, "LL", "Simple", "LL,Simple"]},
            f"Protocol: LL ~{link.latency_us['LL']:g} us for small all-reduces vs Simple "
            f"~{link.latency_us['Simple']:g} us (NCCL's default here), at ~1/4 of Simple's bandwidth; "
            "LL128 is off on PCIe-only hosts.",
        ),
        _Param(
            "nccl_min_nchannels",
            {"env": "NCCL_MIN_NCHANNELS", "type": "categorical", "choices": [None, 4, 8, 16]},
            f"Channels: NCCL's default ({link.default_channels}) reaches "
            f"~{link.busbw_per_channel_gbs * link.default_channels:.0f} GB/s bus bandwidth, "
            f"8+ channels up to ~{link.busbw_max_gbs:g} GB/s.",
        ),
        _Param(
            "nccl_max_nchannels",
            {"env": "NCCL_MAX_NCHANNELS", "type": "categorical", "choices": [None, 8, 16, 32]},
            "Upper bound on channels: more channels use SMs the decode kernels could use.",
        ),
        _Param(
            "nccl_nthreads",
            {"env": "NCCL_NTHREADS", "type": "categorical", "choices": [None, 256, 512]},
            "Threads per NCCL block: more threads move large messages faster over PCIe.",
        ),
        _Param(
            "nccl_buffsize",
            {"env": "NCCL_BUFFSIZE", "type": "categorical", "choices": [None, 4194304, 16777216]},
            "Per-channel buffer: bigger buffers suit the large prefill all-reduces (default 4 MiB).",
        ),
    ]
    if link.topology_path in ("PHB", "SYS"):
        params.append(
            _Param(
                "nccl_p2p_disable",
                {"env": "NCCL_P2P_DISABLE", "type": "categorical", "choices": [None, 1]},
                f"The farthest GPU pair crosses {link.topology_path}: peer-to-peer copies across host "
                "bridges are slow or hang on some boards; 1 routes through host memory instead.",
            )
        )
    return params


def fit_table(model: ModelProfile, hw: HardwareProfile) -> list[tuple[str, float, bool, str]]:
    """(layout, weights GiB per GPU, fits, why not) of every candidate layout."""
    return [(lay.name, lay.weights_gib, lay.fits, lay.failure) for lay in scan(model, hw)]


def _compact(space: Space, point: dict[str, Any], keep: Sequence[str]) -> dict[str, Any]:
    """``point`` without the values the space would fill in anyway (first of each domain)."""
    defaults = space.complete({})
    short = {k: v for k, v in point.items() if k in keep or k not in defaults or defaults[k] != v}
    same = space.effective(space.complete(short)) == space.effective(space.complete(point))
    return short if same else dict(point)


def finish(d: SpaceDraft, *, predictions: int, seed: int = 0) -> Space:
    """Check the draft's start points on the simulator and add its best predictions.

    Returns the loaded space. Start points the memory plan cannot launch are dropped; the
    simulator's top predictions (SGLang spaces only) follow the engine defaults."""
    space = Space.from_dict(d.doc, source=d.doc["name"])
    sg = d.doc["engine"] == "sglang"
    keep = [k for k in ("layout", "mem_fraction_static", "gpu_memory_utilization") if k in space.parameters]
    starts = [p for p in d.doc["start"] if not sg or fits(space, p)]
    seen = {space.key(space.effective(space.complete(p))) for p in starts}
    if sg and predictions > 0:
        from tuner.warmstart import predicted_top

        for point in predicted_top(space, k=PREDICTED_STARTS, trials=predictions, seed=seed):
            key = space.key(point)
            if key not in seen and fits(space, point):
                seen.add(key)
                starts.append(_compact(space, point, keep))
    d.doc["start"] = starts
    return Space.from_dict(d.doc, source=d.doc["name"])
