"""SGLang launch flags and the launch-time rules SGLang enforces.

The rules here are SGLang's own (``server_args.py`` of a mid-2026 snapshot); failure
messages reuse SGLang's wording so a log read by a person or by the failure
classifier looks the same whether it came from the simulator or a real server.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from importlib import resources
from typing import Any

from tuner.engines.base import CUDA_GRAPH_MEM_KEY, KV_CACHE_KEY, MEMORY_LEFT_KEY, Engine, FailurePattern
from tuner.failures import LaunchFailure

#: Command prefixes that may precede the flags of a full launch command line.
LAUNCH_PREFIXES = ("sglang.launch_server", "sglang.launch_server.py", "launch_server")

#: SGLang releases whose complete flag tables ship with the tuner (``data/engines/sglang-<v>.json``,
#: each the output of ``tuner/preflight/sglang_probe.py --dump-options`` run against that
#: release). A space names its target with ``engine_version:``; a host is asked for its own.
RELEASES = ("0.5.22", "0.5.23")
DEFAULT_RELEASE = "0.5.23"

#: The program name in SGLang's argparse messages (``prepare_server_args``), whichever
#: entry point launched it.
PROG = "sglang serve"

#: All-to-all MoE backends that span the whole TP group: SGLang sets ep_size = tp_size for
#: each (``_A2A_EP_SPANNING_BACKENDS`` in ``arg_groups/overrides.py``, 0.5.22 and 0.5.23).
EP_SPANNING_A2A_BACKENDS = frozenset(
    {
        "megamoe",
        "deepep",
        "deepep_v2",
        "mooncake",
        "nixl",
        "ascend_fuseep",
        "flashinfer",
        "flashinfer_megamoe",
        "mori",
        "pplx",
    }
)

#: SGLang's default ``--chunked-prefill-size`` and ``--cuda-graph-max-bs-decode`` for GPUs
#: with 60-160 GiB under TP >= 4 (``_handle_gpu_memory_settings``), and the latter under TP < 4.
DEFAULT_CHUNKED_PREFILL_SIZE = 8192
DEFAULT_CUDA_GRAPH_MAX_BS_TP4 = 512
DEFAULT_CUDA_GRAPH_MAX_BS = 256
#: The same two on GPUs of 160 GiB and more (B200, MI300), at any TP size.
LARGE_GPU_GIB = 160.0
LARGE_GPU_CHUNKED_PREFILL_SIZE = 16384
LARGE_GPU_CUDA_GRAPH_MAX_BS = 512
#: Below this, SGLang's releases disagree on the two defaults (2048-4096 tokens, 8-160
#: graphs), so nothing is assumed there.
KNOWN_DEFAULTS_FROM_GIB = 60.0


@dataclass(frozen=True)
class MemoryDefaults:
    """What SGLang sets, for a GPU's memory and the TP size, where a launch leaves
    ``--chunked-prefill-size`` and ``--cuda-graph-max-bs-decode`` unset
    (``ServerArgs._handle_gpu_memory_settings``)."""

    chunked_prefill_size: int
    cuda_graph_max_bs: int


def memory_defaults(gpu_memory_gib: float, tp_size: int) -> MemoryDefaults | None:
    """SGLang's defaults of the prefill chunk and the decode-graph limit: 8192 tokens and
    256 graphs under TP 4 (512 from TP 4) on GPUs of 60 to 160 GiB (H100, H200, RTX PRO
    6000), 16384 tokens and 512 graphs from 160 GiB (B200); None below 60 GiB, where its
    releases differ."""
    if gpu_memory_gib < KNOWN_DEFAULTS_FROM_GIB:
        return None
    if gpu_memory_gib >= LARGE_GPU_GIB:
        return MemoryDefaults(LARGE_GPU_CHUNKED_PREFILL_SIZE, LARGE_GPU_CUDA_GRAPH_MAX_BS)
    return mid_range_memory_defaults(tp_size)


def mid_range_memory_defaults(tp_size: int) -> MemoryDefaults:
    """SGLang's defaults on GPUs of 60 to 160 GiB (see :func:`memory_defaults`)."""
    graphs = DEFAULT_CUDA_GRAPH_MAX_BS_TP4 if tp_size >= 4 else DEFAULT_CUDA_GRAPH_MAX_BS
    return MemoryDefaults(DEFAULT_CHUNKED_PREFILL_SIZE, graphs)


def release_table(version: str) -> dict[str, Any]:
    """The flag table of SGLang ``version`` (one of :data:`RELEASES`): ``{"prog", "options":
    [{"flags", "dest", "nargs", "type", "choices"}]}``; KeyError naming the known ones."""
    if version not in RELEASES:
        raise KeyError(f"no flag table for SGLang {version}; known releases: {', '.join(RELEASES)}")
    return _load_table(version)


@functools.cache
def _load_table(version: str) -> dict[str, Any]:
    text = resources.files("tuner").joinpath("data", "engines", f"sglang-{version}.json").read_text()
    return json.loads(text)


def choices(version: str, dest: str) -> tuple[str, ...] | None:
    """The values SGLang ``version`` accepts for the option stored in ``dest``."""
    for option in release_table(version)["options"]:
        if option["dest"] == dest:
            return None if option["choices"] is None else tuple(option["choices"])
    raise KeyError(f"SGLang {version} has no option for {dest!r}")


def flag_spellings(version: str) -> frozenset[str]:
    """Every option string SGLang ``version`` registers (``--tp-size``, ``--tp``...)."""
    return frozenset(f for option in release_table(version)["options"] for f in option["flags"])


def nearest_release(version: str) -> str:
    """The newest known release not newer than ``version`` (a host may run a release the
    tuner has no table for); the oldest known one for anything older."""

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", v)[:3])

    older = [r for r in RELEASES if key(r) <= key(version)]
    return max(older, key=key) if older else RELEASES[0]


@dataclass(frozen=True, slots=True)
class ServerArgs:
    """The subset of SGLang's server arguments that shape performance, after parsing."""

    model_path: str | None = None
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    ep_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    moe_dense_tp_size: int | None = None
    enable_eplb: bool = False
    moe_a2a_backend: str = "none"
    deepep_mode: str = "auto"
    max_running_requests: int | None = None
    num_continuous_decode_steps: int = 1
    mem_fraction_static: float | None = None
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int | None = None
    chunked_prefill_size: int | None = None
    kv_cache_dtype: str = "auto"
    speculative_algorithm: str | None = None
    disable_overlap_schedule: bool = False

    @property
    def moe_tp_size(self) -> int:
        """Tensor-parallel degree inside the MoE layer: tp / ep."""
        return self.tp_size // self.ep_size

    @property
    def gpus_needed(self) -> int:
        dp = 1 if self.enable_dp_attention else self.dp_size
        return self.tp_size * self.pp_size * dp

    @property
    def cuda_graph_enabled(self) -> bool:
        return not self.disable_cuda_graph and not (
            self.moe_a2a_backend == "deepep" and self.deepep_mode == "normal"
        )

    @property
    def overlap_schedule(self) -> bool:
        """SGLang turns the overlap scheduler off under pipeline parallelism."""
        return not self.disable_overlap_schedule and self.pp_size == 1

    @property
    def layout(self) -> str:
        """The parallel layout alone, as reports label a trial: ``TP8``, ``TP8 EP8``,
        ``TP4 PP2``, ``PP8 EP8 EPLB``, ``TP8 EP4 DeepEP``."""
        parts = []
        if self.tp_size > 1 or self.pp_size == 1:
            parts.append(f"TP{self.tp_size}")
        if self.pp_size > 1:
            parts.append(f"PP{self.pp_size}")
        if self.ep_size > 1:
            parts.append(f"EP{self.ep_size}")
        if self.dp_size > 1:
            parts.append(f"DP{self.dp_size}")
        if self.enable_eplb:
            parts.append("EPLB")
        if self.moe_a2a_backend == "deepep":
            parts.append("DeepEP")
        return " ".join(parts)

    @property
    def attn_dp_size(self) -> int:
        return self.dp_size if self.enable_dp_attention else 1

    def label(self) -> str:
        """A short human name of the layout, as people write it (``TP8 EP4``)."""
        parts = [f"TP{self.tp_size}"]
        if self.pp_size > 1:
            parts = [f"PP{self.pp_size}"] + (parts if self.tp_size > 1 else [])
        if self.ep_size > 1:
            parts.append(f"EP{self.ep_size}")
        if self.enable_dp_attention and self.dp_size > 1:
            parts.append(f"DP{self.dp_size}-attn")
        if self.moe_a2a_backend == "deepep":
            parts.append(f"DeepEP-{self.deepep_mode}")
        if self.enable_eplb:
            parts.append("EPLB")
        if not self.cuda_graph_enabled:
            parts.append("no-graph")
        return " ".join(parts)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse hook: fail with SGLang's wording, do not exit
        raise LaunchFailure("invalid-args", f"{self.prog}: error: {message}")


_TYPES: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str}

#: Spellings the simulator still understands from older space files: SGLang 0.5.13 and
#: earlier had one ``--cuda-graph-max-bs`` (the decode graph's limit; a deprecated alias of
#: ``--cuda-graph-max-bs-decode`` in 0.5.14-0.5.15, gone by 0.5.20).
_LEGACY_ALIASES = {"--cuda-graph-max-bs": "cuda_graph_max_bs_decode"}


@functools.cache
def _parser(version: str, strict: bool) -> argparse.ArgumentParser:
    """SGLang ``version``'s parser, rebuilt from its flag table: the same spellings, value
    counts, types and choices, so abbreviations, ambiguous prefixes and unknown flags fail
    as they do in SGLang (``allow_abbrev`` as argparse's default: ``--tp 8`` is ``--tp-size 8``,
    as in SGLang's own examples). ``strict=False`` is the simulator's view: unknown flags
    ignored, legacy aliases kept."""
    p = _Parser(prog=PROG, add_help=False, allow_abbrev=True)
    known: set[str] = set()
    for option in release_table(version)["options"]:
        flags = option["flags"]
        known.update(flags)
        nargs = option["nargs"]
        if nargs == 0:
            p.add_argument(*flags, dest=option["dest"], action="store_const", const=True, default=None)
            continue
        kind = _TYPES[option["type"]]
        kwargs: dict[str, Any] = {"dest": option["dest"], "type": kind, "default": None}
        if nargs is not None:
            kwargs["nargs"] = nargs
        if option["choices"] is not None:
            try:
                kwargs["choices"] = [kind(c) for c in option["choices"]]
            except ValueError:
                kwargs["choices"] = option["choices"]
        p.add_argument(*flags, **kwargs)
    if not strict:
        for flag, dest in _LEGACY_ALIASES.items():
            if flag not in known:
                p.add_argument(flag, dest=dest, type=int, default=None)
    return p


def strip_launch_prefix(argv: Sequence[str]) -> list[str]:
    """Drop ``python3 -m sglang.launch_server`` (or a path to it) from a full command line."""
    argv = list(argv)
    if "--" in argv:
        # A wrapper's own options, then ``--``, then the server's flags (the emulator's form).
        return argv[argv.index("--") + 1 :]
    for i, word in enumerate(argv):
        if any(word == p or word.endswith("/" + p) or word.endswith(p) for p in LAUNCH_PREFIXES):
            return argv[i + 1 :]
    return argv


#: SGLang option dest -> field of :class:`ServerArgs` where the names differ.
_FIELD_OF_DEST = {"cuda_graph_max_bs_decode": "cuda_graph_max_bs"}


def parse_args(
    argv: Sequence[str] | str, *, version: str = DEFAULT_RELEASE, strict: bool = False
) -> ServerArgs:
    """Parse SGLang launch flags as SGLang ``version`` does.

    ``strict`` (the launch rules) refuses what SGLang's argparse refuses: unknown flags,
    ambiguous prefixes (``--cuda-graph-max-bs`` when ``-decode`` and ``-prefill`` exist),
    bad values, with its wording (``sglang serve: error: ...``, ``invalid-args``). Without
    it (the simulator) unknown flags are ignored, as a server that has them would."""
    if isinstance(argv, str):
        argv = shlex.split(argv)
    words = strip_launch_prefix(argv)
    parser = _parser(version, strict)
    known = parser.parse_args(words) if strict else parser.parse_known_args(words)[0]
    names = {f.name for f in fields(ServerArgs)}
    values: dict[str, Any] = {}
    for dest, value in vars(known).items():
        name = _FIELD_OF_DEST.get(dest, dest)
        if name in names and value is not None:
            values[name] = value
    attn_dp = getattr(known, "attn_dp_size", None)
    if attn_dp is not None and attn_dp > 1:  # 0.5.23's spelling of --dp-size N --enable-dp-attention
        values.update(enable_dp_attention=True, dp_size=attn_dp)
    return ServerArgs(**values)


def validate(args: ServerArgs, gpu_count: int) -> ServerArgs:
    """Apply SGLang's launch-time rules; return the arguments as SGLang adjusts them.

    Raises :class:`LaunchFailure` with SGLang's message for a combination it refuses.
    """
    for name in ("tp_size", "ep_size", "pp_size", "dp_size", "num_continuous_decode_steps"):
        if getattr(args, name) < 1:
            raise LaunchFailure(
                "invalid-args", f"ValueError: {name} must be a positive integer, got {getattr(args, name)}"
            )
    if args.mem_fraction_static is not None and not 0.0 < args.mem_fraction_static < 1.0:
        raise LaunchFailure(
            "invalid-args",
            f"ValueError: mem_fraction_static must be in (0, 1), got {args.mem_fraction_static}",
        )
    if args.max_running_requests is not None and args.max_running_requests < 1:
        raise LaunchFailure("invalid-args", "ValueError: max_running_requests must be positive")
    if args.moe_a2a_backend in EP_SPANNING_A2A_BACKENDS and args.ep_size != args.tp_size:
        # "{backend} MoE is enabled. The expert parallel size is adjusted from {ep} to the
        # tensor parallel size [{tp}]." (a silent rewrite: another ep is the same server)
        args = _replace(args, ep_size=args.tp_size)
    if args.moe_dense_tp_size not in (None, 1, args.tp_size):
        raise LaunchFailure(
            "invalid-args",
            "AssertionError: moe_dense_tp_size only supports None, 1, or tp_size currently",
        )
    if args.enable_eplb and args.ep_size <= 1:
        raise LaunchFailure(
            "invalid-args",
            "AssertionError  (server_args.py: assert self.ep_size > 1, raised for --enable-eplb)",
        )
    if args.ep_size > args.tp_size:
        # Reported behaviour: moe_tp_size = tp_size // ep_size == 0, then a division by it.
        raise LaunchFailure(
            "crash",
            "ZeroDivisionError: integer division or modulo by zero (moe_tp_size = tp_size // ep_size)",
        )
    if args.tp_size % args.ep_size:
        raise LaunchFailure(
            "invalid-args",
            f"AssertionError: tp_size ({args.tp_size}) must be divisible by ep_size ({args.ep_size})",
        )
    if args.enable_dp_attention and args.tp_size % args.dp_size:
        raise LaunchFailure(
            "invalid-args",
            f"AssertionError: tp_size ({args.tp_size}) must be divisible "
            f"by dp_size ({args.dp_size}) with --enable-dp-attention",
        )
    if args.pp_size > 1 and args.speculative_algorithm:
        raise LaunchFailure(
            "invalid-args",
            "ValueError: Currently speculative decoding does not support "
            "pipeline parallelism (--pp-size > 1).",
        )
    if args.gpus_needed > gpu_count:
        raise LaunchFailure(
            "invalid-args",
            f"RuntimeError: CUDA error: invalid device ordinal (the layout needs {args.gpus_needed} "
            f"GPUs: tp {args.tp_size} x pp {args.pp_size}"
            + ("" if args.enable_dp_attention else f" x dp {args.dp_size}")
            + f", this host has {gpu_count})",
        )
    return args


def _replace(args: ServerArgs, **changes) -> ServerArgs:
    from dataclasses import replace

    return replace(args, **changes)


#: SGLang's log line once the HTTP server answers (``http_server.py``).
READY_PATTERN = r"The server is fired up and ready to roll!"

#: SGLang's startup-failure wording (0.5.22/0.5.23 source), most specific first: a
#: CUDA-graph capture OOM also prints "CUDA out of memory", a busy port under DP attention
#: is a ValueError, and every failure prints a traceback.
FAILURE_PATTERNS: tuple[FailurePattern, ...] = (
    # Decode graph: "Capture cuda graph failed: {e}"; prefill graph (captured by default since
    # 0.5.2x, "breakable" backend): "Fail when using backend: breakable for prefill runner."
    (
        re.compile(r"Capture cuda graph failed|Fail when using backend: \S+ for prefill runner"),
        "cuda-graph-oom",
    ),
    (re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"), "oom"),
    # The launcher's word for a scheduler the kernel's OOM killer took (host memory).
    (re.compile(r"Rank \d+ scheduler died during initialization \(exit code: -9\)"), "oom"),
    # Another process holds GPU memory (SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK makes it fatal).
    (re.compile(r"The memory capacity is unbalanced"), "oom"),
    (re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory"), "oom"),
    # PortArgs: "Port is already in use. dist_init_port=..."; wait_port_available:
    # "port_base at 30001 is not available in 30 seconds", "port 30001 is in use".
    (
        re.compile(
            r"[Aa]ddress already in use|Port is already in use|"
            r"\b[a-z_]*port[a-z_]* at \d+ is not available|\b[Pp]ort \d+ is (?:already )?in use"
        ),
        "port-busy",
    ),
    # argparse: "usage: sglang serve [-h] ..." then "sglang serve: error: argument ..."
    (re.compile(r"^[\w./-]+(?: [\w./-]+)?: error: ", re.MULTILINE), "invalid-args"),
    (re.compile(r"\b(?:AssertionError|ValueError)\b"), "invalid-args"),
    (re.compile(r"Traceback \(most recent call last\)"), "crash"),
)


#: SGLang's memory lines at start-up, one per rank and graph phase. 0.5.2x
#: (``model_runner_components/cuda_graph_setup.py``): "Capture target decode CUDA graph end.
#: bs=[1, 2, 4, ...], elapsed=16.40 s, mem usage=1.93 GB, avail mem=8.16 GB." (and the
#: prefill graph's line); earlier releases: "Capture cuda graph end. Time elapsed: 54.61 s.
#: mem usage=1.93 GB. avail mem=8.16 GB." (0.4 printed avail first). Then the scheduler's
#: "max_total_num_tokens=..., available_gpu_mem=8.10 GB". SGLang's "GB" are GiB (bytes / 2**30).
_CAPTURE_END = re.compile(r"^(?P<prefix>[^\n]*?)Capture\b[^\n]*?\bend\.(?P<rest>[^\n]*)", re.MULTILINE)
_RANK = re.compile(r"\b((?:TP|DP|PP|EP)\d+(?: (?:TP|DP|PP|EP)\d+)*)\]")
_AVAILABLE = re.compile(r"\bavail mem=([0-9.]+) GB")
_GRAPH_USAGE = re.compile(r"\bmem usage=([0-9.]+) GB")
_SCHEDULER_MEMORY = re.compile(r"max_total_num_tokens=[^\n]*\bavailable_gpu_mem=([0-9.]+) GB")
#: The KV cache pool's lines, one per rank: ``mem_cache/memory_pool.py``'s "KV Cache is
#: allocated. dtype: torch.bfloat16, #tokens: 262917, KV size: 17.21 GB" (MLA models such
#: as DeepSeek and Kimi; "K size: 20.96 GB, V size: 20.96 GB" for the others; a labelled
#: pool such as a draft model's is not the server's), then, where the pool is resized after
#: the CUDA graphs are captured, ``kv_pool_runtime.py``'s "Post-capture KV sizing: KV cache
#: allocated. dtype: ..., #tokens: ..., KV size: 16.80 GB, avail mem=...", which supersedes it.
_KV_CACHE = re.compile(
    r"^(?P<prefix>[^\n]*?)(?<![A-Za-z] )"
    r"(?:KV Cache is allocated|Post-capture KV sizing: KV cache allocated)\.(?P<rest>[^\n]*)",
    re.MULTILINE,
)
_KV_SIZE = re.compile(r"\b(?:KV|K|V) size: ([0-9.]+) GB")


def memory_report(log_text: str) -> dict[str, float]:
    """GPU memory left after start-up and taken by CUDA graphs, from SGLang's log (see
    :meth:`tuner.engines.base.Engine.memory_report`): the least left over every rank's
    capture and scheduler lines; the graphs of each rank summed over their phases (decode,
    prefill), the largest rank's; the KV cache pool, the smallest rank's; {} when the log
    has none of these lines (CUDA graphs off and a release without the scheduler's figure)."""
    left = [float(m.group(1)) for m in _SCHEDULER_MEMORY.finditer(log_text)]
    graphs: dict[str, float] = {}
    for line in _CAPTURE_END.finditer(log_text):
        rest = line.group("rest")
        left += [float(m.group(1)) for m in _AVAILABLE.finditer(rest)]
        rank = _RANK.search(line.group("prefix"))
        for usage in _GRAPH_USAGE.finditer(rest):
            key = rank.group(1) if rank else ""
            graphs[key] = graphs.get(key, 0.0) + float(usage.group(1))
    out: dict[str, float] = {}
    if left:
        out[MEMORY_LEFT_KEY] = min(left)
    if graphs:
        out[CUDA_GRAPH_MEM_KEY] = round(max(graphs.values()), 2)
    pools: dict[str, float] = {}
    for line in _KV_CACHE.finditer(log_text):
        size = sum(float(m.group(1)) for m in _KV_SIZE.finditer(line.group("rest")))
        rank = _RANK.search(line.group("prefix"))
        if size:
            pools[rank.group(1) if rank else ""] = size  # a rank's last line stands
    if pools:
        out[KV_CACHE_KEY] = round(min(pools.values()), 2)
    return out


class SGLangEngine(Engine):
    """SGLang (``python -m sglang.launch_server``) of one release: its flags, launch rules
    and log wording. :meth:`for_version` gives the adapter of another release."""

    name = "sglang"
    health_path = "/health"
    ready_pattern = READY_PATTERN
    failure_patterns = FAILURE_PATTERNS
    default_port = 30000
    #: The built-in simulator models SGLang.
    simulated = True
    capacity_flags = frozenset({"--mem-fraction-static", "--max-running-requests"})
    memory_fraction_flag = "--mem-fraction-static"

    def __init__(self, version: str = DEFAULT_RELEASE) -> None:
        release_table(version)  # KeyError for a release without a flag table
        self.version = version

    def memory_report(self, log_text: str) -> dict[str, float]:
        return memory_report(log_text)

    def for_version(self, version: str) -> SGLangEngine:
        """The adapter of SGLang ``version`` (KeyError naming the known releases)."""
        return self if version == self.version else SGLangEngine(version)

    def for_host_version(self, version: str) -> SGLangEngine:
        """The adapter for a host that runs ``version``: its own table, or the nearest
        older one the tuner ships (:func:`nearest_release`)."""
        return self.for_version(nearest_release(version))

    def parse(self, argv: Sequence[str] | str) -> ServerArgs:
        """The typed view of a command line (what launchers, the simulator and reports read):
        the release's spellings, unknown flags passed over. :meth:`check` is strict."""
        return parse_args(argv, version=self.version, strict=False)

    def validate(self, args: ServerArgs, gpu_count: int) -> ServerArgs:  # type: ignore[override]
        return validate(args, gpu_count)

    def check(self, argv: Sequence[str], gpu_count: int) -> None:
        """SGLang's verdict on ``argv``: its argparse (unknown flags, ambiguous prefixes, bad
        values refused with its wording), then its launch rules."""
        self.resolve(argv, gpu_count)

    def resolve(self, argv: Sequence[str], gpu_count: int) -> ServerArgs:
        """The server SGLang would start for ``argv``: parsed strictly, its launch rules
        applied (silent rewrites included, e.g. ep = tp under DeepEP)."""
        return validate(parse_args(argv, version=self.version, strict=True), gpu_count)

    def asked(self, argv: Sequence[str]) -> dict[str, Any]:
        """The typed settings ``argv`` sets explicitly (by :class:`ServerArgs` field name),
        before any resolution: what the configuration asked for."""
        known = _parser(self.version, True).parse_args(strip_launch_prefix(argv))
        names = {f.name for f in fields(ServerArgs)}
        asked = {}
        for dest, value in vars(known).items():
            name = _FIELD_OF_DEST.get(dest, dest)
            if value is not None and name in names:
                asked[name] = value
        return asked

    def server_identity(
        self, argv: Sequence[str], gpu_count: int, resolved: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """What identifies the server ``argv`` starts: every option SGLang parsed (by its
        dest, spelling-independent) with the settings SGLang resolves in place of the
        asked ones. ``resolved`` is SGLang's own resolution (the pre-flight's); without
        it the launch rules resolve. Two command lines with one identity are one server
        (DeepEP with ep 2 or ep 8 under tp 8)."""
        known = _parser(self.version, True).parse_args(strip_launch_prefix(argv))
        identity = {dest: value for dest, value in sorted(vars(known).items()) if value is not None}
        identity.pop("attn_dp_size", None)  # folded into dp_size/enable_dp_attention below
        identity.pop("cuda_graph_max_bs_decode", None)  # the typed view's cuda_graph_max_bs
        if resolved is None:
            resolved = asdict(self.resolve(argv, gpu_count))
        identity.update(resolved)
        return identity

    def same_server(self, identity: Mapping[str, Any], gpu_memory_gib: float) -> dict[str, Any]:
        """``identity`` (:meth:`server_identity`) with the settings that start the same server
        spelled one way, for keying reuse (not for reading ``/server_info`` back, which
        reports them as asked):

        * a ``moe_dense_tp_size`` equal to the TP size is the default (the dense layers
          change only at 1: ``enable_moe_dense_fully_dp``);
        * a ``chunked_prefill_size`` equal to SGLang's default for the GPU
          (:func:`memory_defaults`) is the default;
        * SGLang captures decode graphs up to ``cuda_graph_max_bs`` and no larger than its
          request pool (``max_running_requests``), so with the pool asked for and the memory
          fraction set (its default is derived from the graph limit) every limit at or above
          the pool, the default included, is the pool; without CUDA graphs the limit is
          nothing.
        """
        out = dict(identity)
        dense = out.get("moe_dense_tp_size")
        if dense is not None and dense == out.get("tp_size"):
            out["moe_dense_tp_size"] = None
        running, tp = out.get("max_running_requests"), out.get("tp_size") or 1
        defaults = memory_defaults(gpu_memory_gib, tp)
        if defaults is not None and out.get("chunked_prefill_size") == defaults.chunked_prefill_size:
            out["chunked_prefill_size"] = None
        if out.get("disable_cuda_graph"):
            out["cuda_graph_max_bs"] = None
            return out
        graphs = out.get("cuda_graph_max_bs") or (defaults.cuda_graph_max_bs if defaults else None)
        # Under data parallelism the pool is per rank (the asked value split), left unfolded.
        single_pool = (out.get("dp_size") or 1) == 1
        if graphs and running and single_pool and out.get("mem_fraction_static") is not None:
            out["cuda_graph_max_bs"] = min(graphs, running)
        return out


ENGINE = SGLangEngine()
