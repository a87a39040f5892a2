"""vLLM launch flags and the launch-time rules vLLM enforces.

The flags, their types, choices and aliases are those of vLLM's OpenAI-compatible server
(``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server``, release 0.32); the
rules and their messages come from vLLM's config validation (``vllm/config/parallel.py``,
``vllm/config/scheduler.py``, ``vllm/config/cache.py``), so a configuration rejected here
reads the same as the error a launched server would print. One rule is the tuner's own
(expert parallelism on a single rank), and says so.

vLLM validates its configuration with pydantic: a bad value fails at start-up with
``pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig``
followed by the field and either ``Input should be ...`` (a bound) or ``Value error, ...``
(a rule). :data:`FAILURE_PATTERNS` classify those, vLLM's memory errors and argparse's
wording from a real log.

The simulator models SGLang only: a vLLM space runs on real servers (``--backend local``,
``ssh`` or ``systemd``); :attr:`VLLMEngine.simulated` is False.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, fields

from tuner.engines.base import KV_CACHE_KEY, Engine, FailurePattern
from tuner.failures import LaunchFailure

#: Module names and words that may precede the flags of a full vLLM command line.
LAUNCH_MODULES = (
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.launchers.api_server.entry",
    "vllm.entrypoints.api_server",
)

#: ``--dtype`` choices (``vllm/config/model.py``: ModelDType).
DTYPES = ("auto", "bfloat16", "float", "float16", "float32", "half")

#: ``--kv-cache-dtype`` choices (``vllm/config/cache.py``: CacheDType, release 0.32).
KV_CACHE_DTYPES = (
    "auto",
    "bfloat16",
    "float16",
    "fp8",
    "fp8_ds_mla",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_per_token_head",
    "int4_per_token_head",
    "int8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
    "nvfp4_ds_mla",
    "turboquant_3bit_nc",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_k8v4",
    "ultraquant_4bit",
)

#: vLLM's default ``--port``.
DEFAULT_PORT = 8000


@dataclass(frozen=True, slots=True)
class ServerArgs:
    """The subset of vLLM's engine arguments that shape performance, after parsing.

    ``None`` means "not given": vLLM derives the value at start-up (``max_num_seqs`` and
    ``max_num_batched_tokens`` from the device and usage context, chunked prefill and
    prefix caching from the model), so the rules here only compare values a person set.
    """

    model: str | None = None
    served_model_name: str | None = None
    host: str | None = None
    port: int = DEFAULT_PORT
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    enable_eplb: bool = False
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.92
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"

    @property
    def world_size(self) -> int:
        """vLLM's ``world_size``: TP x PP, the workers of one engine."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def gpus_needed(self) -> int:
        """GPUs of the whole launch: one engine of ``world_size`` per data-parallel rank."""
        return self.world_size * self.data_parallel_size

    @property
    def expert_parallel(self) -> bool:
        """Whether the MoE layers really run expert-parallel (vLLM's ``use_ep``)."""
        return self.enable_expert_parallel and self.tensor_parallel_size * self.data_parallel_size > 1

    @property
    def layout(self) -> str:
        """The parallel layout (``TP8 EP``, ``DP8 EP``, ``TP4 PP2``, ``TP8 EP EPLB``)."""
        parts = []
        if self.data_parallel_size > 1:
            parts.append(f"DP{self.data_parallel_size}")
        if self.tensor_parallel_size > 1 or not parts:
            parts.append(f"TP{self.tensor_parallel_size}")
        if self.pipeline_parallel_size > 1:
            parts.append(f"PP{self.pipeline_parallel_size}")
        if self.expert_parallel:
            parts.append("EP")
        if self.enable_eplb:
            parts.append("EPLB")
        return " ".join(parts)

    def label(self) -> str:
        """A short human name of the launch: its layout, then ``eager`` without CUDA graphs."""
        return f"{self.layout} eager" if self.enforce_eager else self.layout


def human_readable_int(value: str) -> int:
    """vLLM's integer syntax for token counts: ``2048``, ``2k`` (2000), ``2K`` (2048),
    ``25.6k``; decimals only with the decimal suffixes k/m/g/t."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        try:
            return int(number) * 2 ** (10 * ("KMGT".index(suffix) + 1))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. "
                f"Did you mean to use {number}{suffix.lower()} instead?"
            ) from None
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    """``--max-model-len``: like :func:`human_readable_int`, plus ``auto``/``-1`` (derive it)."""
    if value.strip() == "-1" or value.strip().lower() == "auto":
        return -1
    return human_readable_int(value)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse hook: fail like vLLM's parser, do not exit
        raise LaunchFailure("invalid-args", f"{self.prog}: error: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="api_server.py", add_help=False, allow_abbrev=False)
    flag = argparse.BooleanOptionalAction
    p.add_argument("--model")
    p.add_argument("--served-model-name")
    p.add_argument("--host")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--enable-expert-parallel", "-ep", action=flag, default=False)
    p.add_argument("--enable-eplb", action=flag, default=False)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=human_readable_int)
    p.add_argument("--max-model-len", type=human_readable_int_or_auto)
    p.add_argument("--gpu-memory-utilization", "--device-memory-utilization", type=float, default=0.92)
    p.add_argument("--enable-chunked-prefill", action=flag, default=None)
    p.add_argument("--enable-prefix-caching", action=flag, default=None)
    p.add_argument("--enforce-eager", action=flag, default=False)
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    p.add_argument("--dtype", choices=DTYPES, default="auto")
    return p


def _normalise(word: str) -> str:
    """vLLM's parser accepts ``--max_num_seqs`` for ``--max-num-seqs`` (FlexibleArgumentParser)."""
    if word.startswith("--") and "_" in word.split("=", 1)[0]:
        name, sep, value = word.partition("=")
        return name.replace("_", "-") + sep + value
    return word


def strip_launch_prefix(argv: Sequence[str]) -> list[str]:
    """The flags of a full vLLM command line: drop ``python -m vllm.entrypoints.openai.api_server``
    (or ``vllm serve MODEL``, whose positional model becomes ``--model MODEL``)."""
    argv = list(argv)
    if "--" in argv:
        # A wrapper's own options, then ``--``, then the server's flags.
        return argv[argv.index("--") + 1 :]
    for i, word in enumerate(argv):
        if word in LAUNCH_MODULES or word.endswith(("/api_server.py", "/entry.py")):
            return argv[i + 1 :]
        if word == "serve" and i > 0 and argv[i - 1].rsplit("/", 1)[-1] == "vllm":
            rest = argv[i + 1 :]
            if rest and not rest[0].startswith("-"):
                return ["--model", rest[0], *rest[1:]]
            return rest
    return argv


def parse_args(argv: Sequence[str] | str) -> ServerArgs:
    """Parse vLLM launch flags. Unknown flags are accepted and ignored (vLLM has hundreds);
    malformed values of the flags modelled here fail with argparse's wording, as vLLM's
    own parser would (``invalid-args``)."""
    if isinstance(argv, str):
        argv = shlex.split(argv)
    words = [_normalise(w) for w in strip_launch_prefix(argv)]
    known, _unknown = _parser().parse_known_args(words)
    names = {f.name for f in fields(ServerArgs)}
    return ServerArgs(**{k: v for k, v in vars(known).items() if k in names})


def _pydantic(config: str, field: str, message: str, value: object) -> LaunchFailure:
    """The failure vLLM's pydantic config validation prints, on one line."""
    return LaunchFailure(
        "invalid-args",
        f"ValidationError: 1 validation error for {config}: {field}: {message} [input_value={value!r}]",
    )


def validate(args: ServerArgs, gpu_count: int) -> ServerArgs:
    """Apply vLLM's launch-time rules for a host with ``gpu_count`` GPUs.

    Raises :class:`LaunchFailure` (``invalid-args``) with vLLM's message for a
    configuration it refuses; returns the arguments unchanged otherwise.
    """
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        value = getattr(args, name)
        if value < 1:
            raise _pydantic("ParallelConfig", name, "Input should be greater than or equal to 1", value)
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise _pydantic("SchedulerConfig", name, "Input should be greater than or equal to 1", value)
    gmu = args.gpu_memory_utilization
    if gmu <= 0:
        raise _pydantic("CacheConfig", "gpu_memory_utilization", "Input should be greater than 0", gmu)
    if gmu > 1:
        raise _pydantic(
            "CacheConfig", "gpu_memory_utilization", "Input should be less than or equal to 1", gmu
        )
    mnbt, mns = args.max_num_batched_tokens, args.max_num_seqs
    if mnbt is not None and mns is not None and mnbt < mns:
        raise LaunchFailure(
            "invalid-args",
            f"ValueError: max_num_batched_tokens ({mnbt}) must be greater than or equal to "
            f"max_num_seqs ({mns}).",
        )
    mml = args.max_model_len
    if args.enable_chunked_prefill is False and mnbt is not None and mml is not None and 0 < mnbt < mml:
        raise LaunchFailure(
            "invalid-args",
            f"ValueError: max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({mml}). "
            "This effectively limits the maximum sequence length to max_num_batched_tokens and "
            "makes vLLM reject longer sequences. Please increase max_num_batched_tokens or "
            "decrease max_model_len.",
        )
    if args.enable_eplb:
        if not args.enable_expert_parallel:
            raise LaunchFailure(
                "invalid-args", "ValueError: enable_expert_parallel must be True to use EPLB."
            )
        if args.tensor_parallel_size * args.data_parallel_size <= 1:
            raise LaunchFailure(
                "invalid-args",
                "ValueError: EPLB requires tensor, prefill-context, or data parallelism, but got "
                f"TP={args.tensor_parallel_size}, PCP=1, DP={args.data_parallel_size}.",
            )
    if args.enable_expert_parallel and not args.expert_parallel:
        # vLLM accepts the flag and ignores it (fused_moe: use_ep = dp * pcp * tp > 1 and
        # enable_expert_parallel): the launch would measure the plain TP=1 server again.
        raise LaunchFailure(
            "invalid-args",
            "tuner rule: --enable-expert-parallel needs tensor_parallel_size > 1 or "
            "data_parallel_size > 1 (with TP=1 and DP=1 vLLM ignores it)",
        )
    if args.world_size > gpu_count:
        raise LaunchFailure(
            "invalid-args",
            f"ValueError: World size ({args.world_size}) is larger than the number of available "
            f"GPUs ({gpu_count}) in this node.",
        )
    if args.gpus_needed > gpu_count:
        raise LaunchFailure(
            "invalid-args",
            f"ValueError: the layout needs {args.gpus_needed} GPUs (data_parallel_size "
            f"{args.data_parallel_size} x tensor_parallel_size {args.tensor_parallel_size} x "
            f"pipeline_parallel_size {args.pipeline_parallel_size}), this node has {gpu_count}",
        )
    return args


#: vLLM's log lines once the HTTP server accepts requests (uvicorn's start-up lines).
READY_PATTERN = r"Application startup complete\.|Uvicorn running on"

#: vLLM's failure wording, most specific first. Memory errors are ValueErrors in vLLM, so
#: they precede the generic ValueError rule; the pydantic detail line ("Value error, ..."
#: or "Input should be ...") comes before its header line, which names only the config.
FAILURE_PATTERNS: tuple[FailurePattern, ...] = (
    (re.compile(r"No available memory for the cache blocks"), "oom"),
    (re.compile(r"KV cache is needed, which is larger than the available KV cache memory"), "oom"),
    (re.compile(r"is less than desired [GC]PU memory utilization"), "oom"),
    (re.compile(r"Insufficient memory"), "oom"),
    (re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory"), "oom"),
    (re.compile(r"[Aa]ddress already in use"), "port-busy"),
    # argparse: "usage: api_server.py [-h] ..." then "api_server.py: error: argument ..."
    (re.compile(r"^\S+: error: ", re.MULTILINE), "invalid-args"),
    (re.compile(r"^\s*Value error, ", re.MULTILINE), "invalid-args"),
    (re.compile(r"^\s*Input should be ", re.MULTILINE), "invalid-args"),
    (re.compile(r"ValidationError: \d+ validation errors? for \w+"), "invalid-args"),
    (re.compile(r"\b(?:ValueError|NotImplementedError|AssertionError):"), "invalid-args"),
    (re.compile(r"Traceback \(most recent call last\)"), "crash"),
)


#: The KV cache memory each GPU worker has after profiling (``v1/worker/gpu_worker.py``:
#: "Available KV cache memory: 12.34 GiB", once per worker).
_KV_CACHE_MEMORY = re.compile(r"Available KV cache memory: ([0-9.]+) GiB")


def memory_report(log_text: str) -> dict[str, float]:
    """The KV cache pool from vLLM's log (see :meth:`tuner.engines.base.Engine.memory_report`):
    the smallest worker's; {} where the log does not say it (the CPU build)."""
    sizes = [float(m.group(1)) for m in _KV_CACHE_MEMORY.finditer(log_text)]
    return {KV_CACHE_KEY: min(sizes)} if sizes else {}


class VLLMEngine(Engine):
    """vLLM (``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server``): flags,
    launch rules and log wording."""

    name = "vllm"
    health_path = "/health"
    ready_pattern = READY_PATTERN
    failure_patterns = FAILURE_PATTERNS
    default_port = DEFAULT_PORT
    capacity_flags = frozenset({"--gpu-memory-utilization", "--max-num-seqs"})
    memory_fraction_flag = "--gpu-memory-utilization"
    #: The simulator models SGLang only: a vLLM space needs a real backend.
    simulated = False

    def parse(self, argv: Sequence[str] | str) -> ServerArgs:
        return parse_args(argv)

    def validate(self, args: ServerArgs, gpu_count: int) -> ServerArgs:  # type: ignore[override]
        return validate(args, gpu_count)

    def memory_report(self, log_text: str) -> dict[str, float]:
        return memory_report(log_text)


ENGINE = VLLMEngine()
