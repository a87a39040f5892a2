"""SGLang launch flags and the launch-time rules SGLang enforces.

The rules here are SGLang's own (``server_args.py`` of a mid-2026 snapshot); failure
messages reuse SGLang's wording so a log read by a person or by the failure
classifier looks the same whether it came from the simulator or a real server.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, fields

from tuner.engines.base import Engine, FailurePattern
from tuner.failures import LaunchFailure

#: Command prefixes that may precede the flags of a full launch command line.
LAUNCH_PREFIXES = ("sglang.launch_server", "sglang.launch_server.py", "launch_server")

KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16")
MOE_A2A_BACKENDS = ("none", "deepep", "mooncake")
DEEPEP_MODES = ("auto", "normal", "low_latency")

#: SGLang's default ``--chunked-prefill-size`` and ``--cuda-graph-max-bs`` for GPUs with
#: 90-160 GiB under TP >= 4 (server_args.py, ``_handle_gpu_memory_settings``).
DEFAULT_CHUNKED_PREFILL_SIZE = 8192
DEFAULT_CUDA_GRAPH_MAX_BS_TP4 = 512
DEFAULT_CUDA_GRAPH_MAX_BS = 256


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
    def error(self, message: str):  # argparse hook: fail like SGLang, do not exit
        raise LaunchFailure("invalid-args", f"{self.prog}: error: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="launch_server", add_help=False, allow_abbrev=False)
    p.add_argument("--model-path", "--model")
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", "--tp", type=int, default=1)
    p.add_argument("--ep-size", "--expert-parallel-size", "--ep", type=int, default=1)
    p.add_argument("--pp-size", "--pipeline-parallel-size", "--pp", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", "--dp", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--moe-dense-tp-size", type=int)
    p.add_argument("--enable-eplb", action="store_true")
    p.add_argument("--moe-a2a-backend", choices=MOE_A2A_BACKENDS, default="none")
    p.add_argument("--deepep-mode", choices=DEEPEP_MODES, default="auto")
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--num-continuous-decode-steps", type=int, default=1)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", type=int)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    p.add_argument("--speculative-algorithm")
    p.add_argument("--disable-overlap-schedule", action="store_true")
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


def parse_args(argv: Sequence[str] | str) -> ServerArgs:
    """Parse SGLang launch flags. Unknown flags are accepted and ignored, as a server that
    has them would; malformed values fail with argparse's wording (``invalid-args``)."""
    if isinstance(argv, str):
        argv = shlex.split(argv)
    known, _unknown = _parser().parse_known_args(strip_launch_prefix(argv))
    names = {f.name for f in fields(ServerArgs)}
    return ServerArgs(**{k: v for k, v in vars(known).items() if k in names})


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
    if args.moe_a2a_backend == "deepep" and args.ep_size != args.tp_size:
        # server_args.py: "DeepEP MoE `ep_size` is automatically set to be same as `tp_size`."
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

#: SGLang's startup-failure wording, most specific first (a CUDA-graph capture OOM also
#: prints "CUDA out of memory", and every failure prints a traceback).
FAILURE_PATTERNS: tuple[FailurePattern, ...] = (
    (re.compile(r"Capture cuda graph failed"), "cuda-graph-oom"),
    (re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"), "oom"),
    (re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory"), "oom"),
    (re.compile(r"[Aa]ddress already in use|Port \d+ is (?:already )?in use"), "port-busy"),
    # argparse: "usage: launch_server.py [-h] ..." then "launch_server.py: error: argument ..."
    (re.compile(r"^\S+: error: ", re.MULTILINE), "invalid-args"),
    (re.compile(r"\b(?:AssertionError|ValueError)\b"), "invalid-args"),
    (re.compile(r"Traceback \(most recent call last\)"), "crash"),
)


class SGLangEngine(Engine):
    """SGLang (``python -m sglang.launch_server``): flags, launch rules and log wording."""

    name = "sglang"
    health_path = "/health"
    ready_pattern = READY_PATTERN
    failure_patterns = FAILURE_PATTERNS
    default_port = 30000
    #: The built-in simulator models SGLang.
    simulated = True

    def parse(self, argv: Sequence[str] | str) -> ServerArgs:
        return parse_args(argv)

    def validate(self, args: ServerArgs, gpu_count: int) -> ServerArgs:  # type: ignore[override]
        return validate(args, gpu_count)


ENGINE = SGLangEngine()
