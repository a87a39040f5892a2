"""Request traces: JSONL files of real (or synthetic) traffic that a workload replays.

One request per line, a JSON object:

* ``prompt_tokens`` (int >= 1) or ``prompt`` (text): the request's prompt;
* ``output_tokens`` (int >= 1): how many tokens the reply had (replayed as ``max_tokens``
  with EOS ignored, so every backend generates exactly as many);
* ``arrival_s`` (number >= 0, optional): the request's offset from the start of the trace;
  needed for open-loop replay at the trace's own timestamps.

Blank lines and lines starting with ``#`` are skipped. Every problem is reported with the
file and line (:class:`TraceError`), since a trace is usually exported by hand from logs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

#: Characters per token of English text under a BPE tokenizer (the usual rule of thumb):
#: the load generator sizes ``prompt_tokens`` prompts with it, the emulator and trace
#: prompts given as text estimate their token counts with it.
CHARS_PER_TOKEN = 4
#: Upper bound on tokens per prompt or reply in a trace: longer is almost certainly a unit
#: error (bytes for tokens) rather than traffic any engine here serves.
MAX_TRACE_TOKENS = 1_048_576


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace."""

    prompt_tokens: int
    output_tokens: int
    arrival_s: float | None = None
    prompt: str | None = None


@dataclass(frozen=True)
class Trace:
    """A loaded trace: its requests in arrival order (file order when no arrivals are given)."""

    path: Path
    requests: tuple[TraceRequest, ...]

    @property
    def timed(self) -> bool:
        """Whether every request carries an arrival offset (open-loop replay needs them)."""
        return all(r.arrival_s is not None for r in self.requests)

    @property
    def prompt_tokens(self) -> np.ndarray:
        return np.array([r.prompt_tokens for r in self.requests], dtype=np.int64)

    @property
    def output_tokens(self) -> np.ndarray:
        return np.array([r.output_tokens for r in self.requests], dtype=np.int64)

    @property
    def arrivals(self) -> np.ndarray:
        """Arrival offsets in seconds, from 0 (requires :attr:`timed`)."""
        out = np.array([r.arrival_s or 0.0 for r in self.requests], dtype=float)
        return out - out.min() if out.size else out

    @property
    def duration_s(self) -> float:
        return float(self.arrivals.max()) if self.timed and self.requests else 0.0


def text_tokens(text: str) -> int:
    """Approximate token count of a prompt given as text."""
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def _positive_int(value: object, field: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: {field} must be a whole number of tokens, got {value!r}")
    if not 1 <= value <= MAX_TRACE_TOKENS:
        raise TraceError(f"{where}: {field} must be between 1 and {MAX_TRACE_TOKENS}, got {value}")
    return value


def parse_line(obj: object, where: str) -> TraceRequest:
    """One trace line (already decoded from JSON); ``where`` is ``file:line`` for errors."""
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: a request must be a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - {"prompt_tokens", "prompt", "output_tokens", "arrival_s"})
    if unknown:
        raise TraceError(
            f"{where}: unknown field(s) {', '.join(unknown)} "
            "(expected prompt_tokens or prompt, output_tokens, arrival_s)"
        )
    prompt = obj.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or not prompt):
        raise TraceError(f"{where}: prompt must be non-empty text")
    if "prompt_tokens" in obj:
        prompt_tokens = _positive_int(obj["prompt_tokens"], "prompt_tokens", where)
    elif prompt is not None:
        prompt_tokens = text_tokens(prompt)
    else:
        raise TraceError(f"{where}: a request needs prompt_tokens or prompt")
    if "output_tokens" not in obj:
        raise TraceError(f"{where}: output_tokens is missing")
    output_tokens = _positive_int(obj["output_tokens"], "output_tokens", where)
    arrival = obj.get("arrival_s")
    if arrival is not None:
        if isinstance(arrival, bool) or not isinstance(arrival, int | float) or not np.isfinite(arrival):
            raise TraceError(f"{where}: arrival_s must be a number of seconds, got {arrival!r}")
        if arrival < 0:
            raise TraceError(f"{where}: arrival_s must be >= 0, got {arrival}")
        arrival = float(arrival)
    return TraceRequest(prompt_tokens, output_tokens, arrival, prompt)


def parse_trace(lines: Sequence[str], path: Path) -> Trace:
    """Parse the lines of a trace file (see the module docstring for the format)."""
    requests: list[TraceRequest] = []
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
        requests.append(parse_line(obj, where))
    if not requests:
        raise TraceError(f"{path}: the trace has no requests")
    timed = [r.arrival_s is not None for r in requests]
    if any(timed) and not all(timed):
        first = timed.index(False) if timed[0] else timed.index(True)
        raise TraceError(
            f"{path}: arrival_s is given for some requests and not others "
            f"(request {first + 1} differs from the first); give it for all or none"
        )
    if all(timed):
        requests.sort(key=lambda r: r.arrival_s or 0.0)
    return Trace(path, tuple(requests))


@lru_cache(maxsize=16)
def _load(path: Path, mtime_ns: int) -> Trace:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return parse_trace(text.splitlines(), path)


def load_trace(path: str | Path) -> Trace:
    """Load (and cache, until the file changes) a JSONL trace."""
    p = Path(path)
    try:
        mtime = p.stat().st_mtime_ns
    except FileNotFoundError:
        raise TraceError(f"{p}: trace file not found") from None
    if p.is_dir():
        raise TraceError(f"{p}: is a directory, not a trace file")
    return _load(p, mtime)
