"""What every serving-engine adapter provides, and the launch description they share.

A :class:`LaunchSpec` is the complete, engine-neutral description of one server
launch (argv + environment). Search spaces render to it; launchers start it; the
unit and shell renderers in :mod:`tuner.systemd_unit` print it. An :class:`Engine` knows one
engine's flags: how to parse them into its :class:`ServerArgs` and check them (the
launch-time rules, so impossible combinations are rejected without a launch), how to
render flag values, where its health endpoint is and which log lines mean ready or
failed. Callers use only what :class:`Engine` and :class:`ServerArgs` declare.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from tuner.failures import FailureClass, LaunchFailure
from tuner.launchers.classify import classify_failure

#: A log pattern and the failure class a match means (see tuner.failures).
FailurePattern = tuple[re.Pattern[str], FailureClass]


class ServerArgs(Protocol):
    """What callers read of a parsed launch command line, whatever the engine.

    Each engine's record (:class:`tuner.engines.sglang.ServerArgs`,
    :class:`tuner.engines.vllm.ServerArgs`) is a frozen dataclass with these members
    and the engine's own fields beside them.
    """

    @property
    def host(self) -> str | None:
        """The ``--host`` the server binds (``None``: the engine's default)."""
        ...

    @property
    def port(self) -> int:
        """The port the server listens on (the engine's default when not given)."""
        ...

    @property
    def served_model_name(self) -> str | None:
        """The model name the server answers to, when ``--served-model-name`` gives one."""
        ...

    @property
    def gpus_needed(self) -> int:
        """GPUs the whole launch occupies."""
        ...

    @property
    def layout(self) -> str:
        """The parallel layout, as reports label a trial (``TP8 EP8``, ``TP4 PP2``)."""
        ...

    def label(self) -> str:
        """A short human name of the launch: its layout and the switches that shape
        performance (``TP8 EP4 no-graph``)."""
        ...


class LaunchSpec(BaseModel):
    """One server launch: the full command line and the environment it adds.

    ``argv[0]`` is the program as the space file names it (``python3``); renderers that
    need an absolute path (systemd) resolve it. ``env`` holds only what the launch sets
    on top of the inherited environment. :attr:`args` is the command line parsed by
    the spec's engine, once per spec.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: list[str]
    env: dict[str, str] = {}
    engine: str

    @cached_property
    def args(self) -> ServerArgs:
        """``argv`` as the engine parses it; raises ``LaunchFailure("invalid-args")``
        for a malformed value (nothing is launched then)."""
        from tuner import engines

        return engines.get(self.engine).parse(self.argv)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> LaunchSpec:
        """A copy; a changed command line is parsed again when its :attr:`args` are read."""
        copy = super().model_copy(update=update, deep=deep)
        if update:
            copy.__dict__.pop("args", None)
        return copy


def format_value(value: Any) -> str:
    """A flag or environment value as a person would type it.

    Floats use their shortest form at 12 significant digits, so a sampled
    ``0.8800000000000001`` renders as ``0.88``; integral floats keep a ``.0`` so a
    float flag never looks like an int. Booleans render as ``true``/``false`` (bare
    flags are handled by :func:`render_flags`, env booleans by the caller).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:.12g}"
        if text.lstrip("-").isdigit():
            text += ".0"
        return text
    return str(value)


def render_flags(flags: Mapping[str, Any]) -> list[str]:
    """Render ``{flag: value}`` into argv words, in the mapping's order.

    ``True`` is a bare flag, ``False`` and ``None`` leave the flag out (the engine
    default), a list becomes one flag followed by each item (argparse ``nargs``), any
    other value is ``flag value``.
    """
    argv: list[str] = []
    for flag, value in flags.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list | tuple):
            argv.append(flag)
            argv.extend(format_value(v) for v in value)
        else:
            argv.extend((flag, format_value(value)))
    return argv


def render_env(env: Mapping[str, Any]) -> dict[str, str]:
    """Render environment values: ``None`` unsets (left out), booleans are ``1``/``0``."""
    out: dict[str, str] = {}
    for name, value in env.items():
        if value is None:
            continue
        out[name] = ("1" if value else "0") if isinstance(value, bool) else format_value(value)
    return out


def classify_log(patterns: Iterable[FailurePattern], log_text: str) -> tuple[FailureClass, str] | None:
    """First pattern (in the given priority order) found in ``log_text``: its class and
    the log line it matched (its last occurrence, the freshest)."""
    for regex, reason in patterns:
        last = None
        for last in regex.finditer(log_text):  # noqa: B007 - the last match is wanted
            pass
        if last is not None:
            start = log_text.rfind("\n", 0, last.start()) + 1
            end = log_text.find("\n", last.start())
            return reason, log_text[start : end if end >= 0 else len(log_text)].strip()
    return None


#: Keys of :meth:`Engine.memory_report` in a trial's ``server_info``, the same for the
#: simulator and real servers: GPU memory left per GPU after start-up (the tightest GPU's,
#: GiB), and what the CUDA graphs took of it (the largest, GiB).
MEMORY_LEFT_KEY = "available_gpu_mem_gib"
CUDA_GRAPH_MEM_KEY = "cuda_graph_mem_gib"
#: ... and the KV cache pool it allocated per GPU (GiB): the room its requests' tokens share.
KV_CACHE_KEY = "kv_cache_gib"


class Engine(ABC):
    """A serving engine's adapter: the base of :class:`~tuner.engines.sglang.SGLangEngine`
    and :class:`~tuner.engines.vllm.VLLMEngine`.

    Subclasses set the class attributes and implement :meth:`parse` and
    :meth:`validate`; rendering (``--flag value`` words) and failure classification are
    shared.
    """

    #: registry name, as search-space files spell it (``sglang``)
    name: ClassVar[str]
    #: HTTP path that answers 200 once the server serves
    health_path: ClassVar[str] = "/health"
    #: a log line (regular expression) that means the server is ready
    ready_pattern: ClassVar[str]
    #: ordered log patterns, most specific first: the first that matches classifies a failure
    failure_patterns: ClassVar[Sequence[FailurePattern]] = ()
    #: the port the engine listens on when the command line does not say
    default_port: ClassVar[int]
    #: whether the built-in simulator models this engine (``--backend sim``, ``--warm-start sim``)
    simulated: ClassVar[bool] = False
    #: Flags whose higher value lets the server run more requests at once (its KV cache, its
    #: running-request cap): where requests wait for room, more of them is expected to help.
    capacity_flags: ClassVar[frozenset[str]] = frozenset()
    #: The capacity flag that sets the share of each GPU's memory the server keeps for weights
    #: and KV cache (what is left of that share after the weights is the KV pool); None where
    #: the engine has none.
    memory_fraction_flag: ClassVar[str | None] = None

    @abstractmethod
    def parse(self, argv: Sequence[str] | str) -> ServerArgs:
        """Parse a command line (with or without its program prefix) into the engine's
        typed view of it; raise LaunchFailure("invalid-args", ...) for malformed values."""

    def for_version(self, version: str) -> Engine:
        """The adapter of release ``version`` (its flag spellings and rules); KeyError when
        the adapter does not tell releases apart (the default) or knows no such release."""
        raise KeyError(f"engine {self.name!r} does not tell releases apart; leave engine_version out")

    @abstractmethod
    def validate(self, args: ServerArgs, gpu_count: int) -> ServerArgs:
        """Apply the engine's launch-time rules for a host with ``gpu_count`` GPUs; return
        the arguments as the engine adjusts them, or raise
        :class:`tuner.failures.LaunchFailure` with the engine's own wording if it refuses."""

    def check(self, argv: Sequence[str], gpu_count: int) -> None:
        """:meth:`validate` a command line (parsed first)."""
        self.validate(self.parse(argv), gpu_count)

    def render(self, command: Sequence[str], flags: Mapping[str, Any], env: Mapping[str, Any]) -> LaunchSpec:
        """The launch from a program prefix, ``{flag: value}`` and ``{VAR: value}``:
        ``command + --flag value ...`` and the rendered environment (see
        :func:`render_flags` and :func:`render_env`)."""
        return LaunchSpec(argv=[*command, *render_flags(flags)], env=render_env(env), engine=self.name)

    def memory_report(self, log_text: str) -> dict[str, float]:
        """What a started server's log says of its GPU memory (what it says of it; nothing
        by default): how much is left once the server has allocated everything it keeps
        (:data:`MEMORY_LEFT_KEY`), what its CUDA graphs took (:data:`CUDA_GRAPH_MEM_KEY`),
        and its KV cache pool (:data:`KV_CACHE_KEY`)."""
        return {}

    def classify(self, log_text: str) -> tuple[FailureClass, str] | None:
        """The failure class and the matching log line, by :attr:`failure_patterns` alone."""
        return classify_log(self.failure_patterns, log_text)

    def classify_exit(self, returncode: int | None, log_text: str, *, what: str = "server") -> LaunchFailure:
        """Why a server of this engine died: its exit status and log, by this engine's
        failure patterns and ready line, then the engine-neutral ones
        (:func:`tuner.launchers.classify.classify_failure`)."""
        return classify_failure(
            returncode=returncode,
            log_text=log_text,
            patterns=self.failure_patterns,
            ready_pattern=self.ready_pattern,
            what=what,
        )
