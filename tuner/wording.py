"""Values and outcomes in the words a person writes them, shared by every output.

A float parameter stored as ``0.8400000000000001`` is ``0.84`` to whoever set it; a
parameter left unset is ``-`` (the engine's default), never ``None``; a configuration the
engine's rules refuse before any launch is a refusal, not a crash.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Engines' names as their projects spell them.
ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}
#: Prefixes of the reasons :meth:`tuner.space.Space.check` gives for a refused configuration.
_RULE_PREFIXES = ("invalid-args: ", "crash: ", "oom: ")
_CONSTRAINT_PREFIX = "constraint: "


def fmt_value(v: Any) -> str:
    """A parameter value as a person writes it: ``0.84``, ``16``, ``true``, ``-`` for unset."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def change_text(name: str, old: Any, new: Any) -> str:
    """``mem_fraction_static 0.88 -> 0.9``."""
    return f"{name} {fmt_value(old)} -> {fmt_value(new)}"


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{name: (value before, value after)}`` for the parameters two configurations set
    differently (a parameter one of them does not set is ``None`` there; floats that print
    alike, such as ``0.88`` and ``0.8800000000000001``, are the same), in ``after``'s order,
    then ``before``'s."""
    keys = list(after) + [k for k in before if k not in after]
    pairs = {k: (before.get(k), after.get(k)) for k in keys}
    return {k: pair for k, pair in pairs.items() if fmt_value(pair[0]) != fmt_value(pair[1])}


def changes_text(changed: Mapping[str, tuple[Any, Any]]) -> str:
    """``a 1 -> 8, b - -> LL``: every change (as :func:`changes` gives them), none cut."""
    return ", ".join(change_text(k, old, new) for k, (old, new) in changed.items())


def params_text(params: Mapping[str, Any], names: Iterable[str] | None = None) -> str:
    """``name=value`` pairs (of ``names`` only, when given), values as :func:`fmt_value`."""
    keys = list(params) if names is None else [k for k in names if k in params]
    return " ".join(f"{k}={fmt_value(params[k])}" for k in keys)


def engine_name(engine: str | None) -> str:
    """``SGLang``, ``vLLM``, or the engine id as given."""
    return ENGINE_NAMES.get((engine or "").lower(), engine or "the engine")


def refusal_text(reason: str | None, engine: str | None) -> str:
    """Why a configuration was not launched, as a refusal: ``refused by SGLang's rules:
    ZeroDivisionError ...`` or ``refused by the space's constraint: ...`` (``reason``: the
    stored reasons, ``; ``-separated)."""
    out = []
    for part in (reason or "").split("; "):
        part = part.strip()
        if not part:
            continue
        if part.startswith(_CONSTRAINT_PREFIX):
            out.append(f"refused by the space's constraint: {part[len(_CONSTRAINT_PREFIX) :]}")
            continue
        for prefix in _RULE_PREFIXES:
            if part.startswith(prefix):
                part = part[len(prefix) :]
                break
        out.append(f"refused by {engine_name(engine)}'s rules: {part}")
    return "; ".join(out) or "refused by the launch rules"
