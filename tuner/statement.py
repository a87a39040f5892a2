"""What a study measured, on what, in which units: one statement every output repeats.

A number without its experiment misleads: 2800 tok/s at C=256 on short chat prompts with
EOS honoured is a different figure from 1500 tok/s on another sweep, and a simulated
figure is a prediction, not a measurement. The search header and summary, ``tuner best``,
the report and the dashboard's study note therefore all print the same three lines, made
here from the study's stored workload and backend:

* ``workload: short chat prompts, C=1 at 512 max tokens, then C=32..256 (5 levels) at 2048,
  burst, EOS honoured``
* ``backend: simulated: 8x RTX PRO 6000 Blackwell (PCIe Gen5, no NVLink), Kimi K2.6 (...)``
* ``units: tok/s = generated tokens per second, summed over the requests of a level``

The backend is stored as a small mapping (:func:`backend_of`) in the study's user
attribute :data:`tuner.trial_record.STUDY_BACKEND` when the search starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuner.workload import Workload

#: The unit every throughput figure is in.
UNITS = "tok/s = generated (output) tokens per second, summed over the requests of a level"
#: The program the emulator runs as (its launch command names it).
EMULATOR_MODULE = "tuner.sim.server"


def _span(levels: Sequence[int]) -> str:
    if len(levels) == 1:
        return f"C={levels[0]}"
    return f"C={levels[0]}..{levels[-1]} ({len(levels)} levels)"


def workload_text(workload: Mapping[str, Any] | Workload | None) -> str:
    """The workload in one line, as a person running ``sglang.bench_serving`` would say it."""
    if workload is None:
        return "not recorded"
    w = workload if isinstance(workload, Workload) else Workload(**dict(workload))
    prompts = "short chat prompts" if w.prompt_tokens is None else f"{w.prompt_tokens}-token prompts"
    levels = list(w.levels)
    parts = [prompts]
    if levels[0] == 1 and len(levels) > 1:
        parts.append(f"C=1 at {w.single_max_tokens} max tokens, then {_span(levels[1:])} at {w.max_tokens}")
    elif levels == [1]:
        parts.append(f"C=1 at {w.single_max_tokens} max tokens")
    else:
        parts.append(f"{_span(levels)} at {w.max_tokens} max tokens")
    if w.kind == "burst":
        parts.append("burst (all C requests at once)")
    elif w.kind == "closed-loop":
        parts.append(f"closed loop, C in flight for {w.duration_s:g} s")
    else:
        parts.append(f"Poisson arrivals at {w.rate:g} x C requests/s for {w.duration_s:g} s")
    parts.append("EOS ignored (every request generates max tokens)" if w.ignore_eos else "EOS honoured")
    return ", ".join(parts)


def _option(argv: Sequence[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def backend_of(
    backend: str,
    *,
    hardware: str | None = None,
    model: str | None = None,
    command: Sequence[str] = (),
    hosts: Sequence[str] = (),
) -> dict[str, Any]:
    """The stored form of where a study's trials run: ``kind`` (simulated, emulated or
    real), the launcher (``backend``), the host and model profile names where the numbers
    come from a model of them, the emulator's ``speedup``, and the ``hosts``."""
    names = _profile_names(hardware, model)
    ids = {"hardware_id": hardware, "model_id": model}
    if backend == "sim":
        return {"kind": "simulated", "backend": backend, **names, **ids}
    if any(EMULATOR_MODULE in word for word in command):
        try:
            speedup = float(_option(command, "--speedup") or 1.0)
        except ValueError:
            speedup = 1.0
        hw, mdl = _option(command, "--hardware"), _option(command, "--model")
        emulated = {**_profile_names(hw, mdl), "hardware_id": hw, "model_id": mdl}
        return {"kind": "emulated", "backend": backend, "speedup": speedup, **emulated, "hosts": list(hosts)}
    return {"kind": "real", "backend": backend, "hosts": list(hosts)}


def _profile_names(hardware: str | None, model: str | None) -> dict[str, str]:
    """Display names of the hardware and model profiles (their ids where unknown)."""
    from tuner import profiles

    out: dict[str, str] = {}
    for key, ident, load in (("hardware", hardware, profiles.hardware), ("model", model, profiles.model)):
        if not ident:
            continue
        try:
            out[key] = load(ident).name
        except Exception:  # an edited or missing profile: its id still says what it was
            out[key] = ident
    return out


def speedup(backend: Mapping[str, Any] | None) -> float | None:
    """The emulator's speed-up over the modelled host, or None where the numbers are not emulated."""
    if backend and backend.get("kind") == "emulated":
        return float(backend.get("speedup") or 1.0)
    return None


def backend_text(backend: Mapping[str, Any] | None, fallback: str | None = None) -> str:
    """Where the numbers come from, in one line (``fallback``: the launcher name a study
    recorded per trial, for studies made before the backend was stored)."""
    if not backend:
        if fallback == "sim":
            return "simulated (the built-in performance model, not a measurement)"
        return f"{fallback or 'unknown'} (not recorded in the study)"
    what = ", ".join(v for v in (backend.get("hardware"), backend.get("model")) if v)
    kind = backend.get("kind")
    if kind == "simulated":
        return (
            f"simulated: {what or 'the space hardware'} (the built-in performance model, not a measurement)"
        )
    hosts = ", ".join(backend.get("hosts") or []) or "this machine"
    if kind == "emulated":
        k = speedup(backend) or 1.0
        scale = (
            f"; runs {k:g}x faster than the modelled host: its tok/s are {k:g}x the host's, its times 1/{k:g}"
            if k != 1
            else ""
        )
        where = f"emulator over HTTP, {backend.get('backend')} on {hosts}"
        return f"emulated: {what or 'a modelled host'} ({where}){scale}"
    return f"real: {backend.get('backend')} on {hosts}"


def source_word(backend: Mapping[str, Any] | None, fallback: str | None = None) -> str:
    """Where the numbers come from, in a word or three: ``simulated``, ``emulated at 10x``, ``real``."""
    if not backend:
        if fallback == "sim":
            return "simulated"
        return f"backend {fallback}" if fallback else "backend unknown"
    k = speedup(backend)
    if k is not None:
        return f"emulated at {k:g}x" if k != 1 else "emulated"
    return str(backend.get("kind") or "unknown")


def duration_text(seconds: float) -> str:
    """Server time as a person reads it: seconds or minutes when short, hours otherwise."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def server_time(
    seconds: float, backend: Mapping[str, Any] | None, fallback: str | None = None
) -> tuple[str, str]:
    """What the study's servers ran, as (label, value): ``("simulated server time", "28 min")``,
    ``("server time", "7 s (emulator at 20x: ~2 min on the modelled host)")`` or
    ``("server time", "3.1 h")``; an emulator's time is also given on the host it models."""
    if (backend or {}).get("kind") == "simulated" or (not backend and fallback == "sim"):
        return "simulated server time", duration_text(seconds)
    k = speedup(backend)
    if k is not None and k != 1:
        modelled = duration_text(seconds * k)
        return (
            "server time",
            f"{duration_text(seconds)} (emulator at {k:g}x: ~{modelled} on the modelled host)",
        )
    return "server time", duration_text(seconds)


def server_time_text(seconds: float, backend: Mapping[str, Any] | None, fallback: str | None = None) -> str:
    """:func:`server_time` as one phrase: ``simulated server time 28 min``."""
    return " ".join(server_time(seconds, backend, fallback))


def statement_lines(
    workload: Mapping[str, Any] | Workload | None,
    backend: Mapping[str, Any] | None,
    *,
    fallback_backend: str | None = None,
    proxy: Mapping[str, Any] | Workload | None = None,
) -> list[str]:
    """The three lines: ``workload: ...``, ``backend: ...``, ``units: ...``, and when trials
    were screened on a proxy of the workload (:mod:`tuner.fidelity`), a line saying which
    levels."""
    lines = [f"workload: {workload_text(workload)}"]
    levels = _screening_levels(workload, proxy)
    if levels:
        lines.append(f"screened on: C={', C='.join(map(str, levels))} of it; finalists measured on all of it")
    return [*lines, f"backend: {backend_text(backend, fallback_backend)}", f"units: {UNITS}"]


def _screening_levels(
    workload: Mapping[str, Any] | Workload | None, proxy: Mapping[str, Any] | Workload | None
) -> list[int] | None:
    """The proxy's levels when it is the workload's screening subset (not the whole of it)."""
    if workload is None or proxy is None:
        return None
    target = workload if isinstance(workload, Workload) else Workload.model_validate(workload)
    screen = proxy if isinstance(proxy, Workload) else Workload.model_validate(proxy)
    return list(screen.levels) if screen != target else None
