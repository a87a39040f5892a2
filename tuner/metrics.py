"""Metrics of a concurrency level, computed from per-request records.

Definitions (the ones serving benchmarks use):

* TTFT: first token time minus request start.
* ITL: gaps between consecutive token (chunk) arrivals within a request.
* TPOT: (E2E - TTFT) / (output_tokens - 1), per request, then averaged.
* E2E: end minus start.
* aggregate output tok/s: output tokens of finished requests divided by the
  level's wall time (first request sent to last request finished); for a closed-loop
  window, the tokens streamed inside the window (finished or not) divided by its length;
  for a burst stopped before it drained, the projection it was stopped on
  (:mod:`tuner.level_watch`).
  Counting only requests that finish inside the window would undercount every request
  longer than a fraction of it (at 1k tokens and 34 ms a token, a request takes 35 s of a
  60 s window), and favour short requests and short windows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel

from tuner.request_records import CUT_AT_WINDOW_END, LevelRecords, RequestRecord


class LevelMetrics(BaseModel):
    """Summary of one concurrency level; the JSON shape of ``tuner simulate`` and ``tuner bench``."""

    concurrency: int
    output_tok_s: float
    wall_s: float
    completed: int
    failed: int = 0
    output_tokens: int
    ttft_s_p50: float | None = None
    ttft_s_p99: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p99: float | None = None
    tpot_ms_mean: float | None = None
    e2e_s_p50: float | None = None
    per_stream_tok_s: float | None = None
    errors: dict[str, int] = {}
    #: True for a burst level stopped before it drained, as it could not reach the bar it was
    #: held to (:mod:`tuner.level_watch`): ``wall_s`` and the counts are those up to the stop,
    #: ``output_tok_s`` the projected throughput of the whole level. None (left out of a
    #: trial's stored levels) otherwise.
    stopped_early: bool | None = None


#: Marks the throughput of a level stopped before it drained: a projection, not a measurement.
PROJECTED_MARK = "~"


#: A level's first-token tail reads as requests held back for room (the KV cache or the
#: running-request cap full, so that they start only as others finish) when its p99 is this
#: many times its median. Queueing for prefill alone does not do that: a burst's requests are
#: prefilled in arrival order, which spreads their TTFT evenly up to about twice the median.
#: In the simulator of the reference host (C=256, 2048 tokens), the memory fraction 0.86
#: gives p99 56 s against a median of 8.6 s, 0.94 gives 27 s against 2.0 s, and a request
#: cap of 128 gives 181 s against 20 s; C=32 gives p99 = median.
HELD_BACK_RATIO = 4.0
#: ... and the tail is at least this share of the level's wall time: a second's wait on a
#: level of a minute is no reason to resize anything.
HELD_BACK_WALL_SHARE = 0.05


def waited_for_room(level: Mapping[str, Any]) -> bool:
    """Whether a level's requests waited for room to start (:data:`HELD_BACK_RATIO`,
    :data:`HELD_BACK_WALL_SHARE`), read from the level as a trial stores it; False for one
    stream or a level without TTFTs."""
    p50, p99, wall = level.get("ttft_s_p50"), level.get("ttft_s_p99"), level.get("wall_s")
    if not p50 or not p99 or not wall or (level.get("concurrency") or 0) <= 1:
        return False
    return p99 > HELD_BACK_RATIO * p50 and p99 > HELD_BACK_WALL_SHARE * wall


def tok_s_text(level: LevelMetrics | Mapping[str, Any], spec: str = ".1f") -> str:
    """A level's tok/s as every output prints it: a stopped level's projection marked
    :data:`PROJECTED_MARK` (``~1660.2``)."""
    lv = level.model_dump() if isinstance(level, LevelMetrics) else level
    return (PROJECTED_MARK if lv.get("stopped_early") else "") + format(lv["output_tok_s"], spec)


def _percentile(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def tokens_in_window(level: LevelRecords) -> int:
    """Output tokens streamed inside the level's window, by their arrival times. A chunk of
    several tokens counts as the level's average tokens per chunk (finished requests say
    how many tokens their chunks held; a cut request knows only its chunks)."""
    finished = [
        (r.output_tokens, r.token_times)
        for r in level.records
        if r.ok and r.token_times is not None and len(r.token_times)
    ]
    chunks = sum(len(times) for _, times in finished)
    per_chunk = sum(tokens for tokens, _ in finished) / chunks if chunks else 1.0
    total = 0.0
    for r in level.records:
        if r.token_times is None or not len(r.token_times) or not (r.ok or r.error == CUT_AT_WINDOW_END):
            continue
        inside = int(np.count_nonzero((r.token_times >= level.started) & (r.token_times <= level.ended)))
        total += inside * (r.output_tokens / len(r.token_times) if r.ok else per_chunk)
    return round(total)


def _finished_in(level: LevelRecords, r: RequestRecord) -> bool:
    return r.ok and (not level.window or level.started <= r.end <= level.ended)  # type: ignore[operator]


def summarize(level: LevelRecords) -> LevelMetrics:
    """Reduce a level's records to its metrics (latencies over the requests that finished,
    inside the window for a closed loop)."""
    done = [r for r in level.records if _finished_in(level, r)]
    wall = max(level.ended - level.started, 1e-9)
    tokens = tokens_in_window(level) if level.window else int(sum(r.output_tokens for r in done))
    ttft = np.array([r.first_token - r.start for r in done if r.first_token is not None])
    e2e = np.array([r.end - r.start for r in done])  # type: ignore[operator]
    tpot = np.array(
        [
            (r.end - r.first_token) / (r.output_tokens - 1)  # type: ignore[operator]
            for r in done
            if r.first_token is not None and r.output_tokens > 1
        ]
    )
    gaps = [np.diff(r.token_times) for r in done if r.token_times is not None and len(r.token_times) > 1]
    itl = np.concatenate(gaps) if gaps else np.array([])
    errors = Counter(level.errors)
    for r in level.records:
        if not r.ok and r.error != CUT_AT_WINDOW_END:
            errors[r.error or "incomplete"] += 1
    per_stream = np.array(
        [
            r.output_tokens / (r.end - r.first_token)
            for r in done
            if r.first_token is not None and r.end is not None and r.end > r.first_token
        ]
    )
    return LevelMetrics(
        concurrency=level.concurrency,
        output_tok_s=tokens / wall if level.projected_tok_s is None else level.projected_tok_s,
        wall_s=wall,
        completed=len(done),
        failed=sum(errors.values()) - sum(level.errors.values()),
        output_tokens=tokens,
        ttft_s_p50=_percentile(ttft, 50),
        ttft_s_p99=_percentile(ttft, 99),
        itl_ms_p50=None if not itl.size else float(np.percentile(itl, 50) * 1e3),
        itl_ms_p99=None if not itl.size else float(np.percentile(itl, 99) * 1e3),
        tpot_ms_mean=None if not tpot.size else float(tpot.mean() * 1e3),
        e2e_s_p50=_percentile(e2e, 50),
        per_stream_tok_s=None if not per_stream.size else float(per_stream.mean()),
        errors=dict(errors),
        stopped_early=True if level.projected_tok_s is not None else None,
    )
