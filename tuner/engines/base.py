"""What every serving-engine adapter provides, and the launch description they share.

A :class:`LaunchSpec` is the complete, engine-neutral description of one server
launch (argv + environment). Search spaces render to it; launchers start it; the
unit and shell renderers in :mod:`tuner.units` print it. An :class:`Engine` knows one
engine's flags: how to parse and check them (the launch-time rules, so impossible
combinations are rejected without a launch), how to render flag values, where its
health endpoint is and which log lines mean ready or failed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from tuner.failures import FailureClass

#: A log pattern and the failure class a match means (see tuner.failures).
FailurePattern = tuple[re.Pattern[str], FailureClass]


class LaunchSpec(BaseModel):
    """One server launch: the full command line and the environment it adds.

    ``argv[0]`` is the program as the space file names it (``python3``); renderers that
    need an absolute path (systemd) resolve it. ``env`` holds only what the launch sets
    on top of the inherited environment.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: list[str]
    env: dict[str, str] = {}
    engine: str


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


@runtime_checkable
class Engine(Protocol):
    """A serving engine's adapter (SGLang today; vLLM has room beside it)."""

    #: registry name, as search-space files spell it (``sglang``)
    name: str
    #: HTTP path that answers 200 once the server serves
    health_path: str
    #: a log line (regular expression) that means the server is ready
    ready_pattern: str
    #: ordered log patterns, most specific first: the first that matches classifies a failure
    failure_patterns: Sequence[FailurePattern]
    #: the port the engine listens on when the command line does not say
    default_port: int

    def parse(self, argv: Sequence[str]) -> object:
        """Parse a command line (with or without its program prefix) into the engine's
        typed view of it; raise LaunchFailure("invalid-args", ...) for malformed values."""
        ...

    def check(self, argv: Sequence[str], gpu_count: int) -> None:
        """Apply the engine's launch-time rules for a host with ``gpu_count`` GPUs; raise
        :class:`tuner.failures.LaunchFailure` with the engine's own wording if it refuses."""
        ...

    def render(self, command: Sequence[str], flags: Mapping[str, Any], env: Mapping[str, Any]) -> LaunchSpec:
        """Build the launch from a program prefix, ``{flag: value}`` and ``{VAR: value}``."""
        ...

    def classify(self, log_text: str) -> tuple[FailureClass, str] | None:
        """The failure class and the matching log line, by :attr:`failure_patterns`."""
        ...


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


class ArgparseEngine:
    """Shared behaviour of engines whose launchers take ``--flag value`` arguments."""

    name: str
    failure_patterns: Sequence[FailurePattern] = ()

    def render(self, command: Sequence[str], flags: Mapping[str, Any], env: Mapping[str, Any]) -> LaunchSpec:
        """``command + --flag value ...`` and the rendered environment (see
        :func:`render_flags` and :func:`render_env`)."""
        return LaunchSpec(argv=[*command, *render_flags(flags)], env=render_env(env), engine=self.name)

    def classify(self, log_text: str) -> tuple[FailureClass, str] | None:
        return classify_log(self.failure_patterns, log_text)
