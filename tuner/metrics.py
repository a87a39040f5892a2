"""Metrics of a concurrency level, computed from per-request records.

Definitions (the ones serving benchmarks use):

* TTFT: first token time minus request start.
* ITL: gaps between consecutive token (chunk) arrivals within a request.
* TPOT: (E2E - TTFT) / (output_tokens - 1), per request, then averaged.
* E2E: end minus start.
* aggregate output tok/s: output tokens of finished requests divided by the
  level's wall time (first request sent to last request finished).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from pydantic import BaseModel

from tuner.request_records import LevelRecords


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


def _percentile(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def summarize(level: LevelRecords) -> LevelMetrics:
    """Reduce a level's records to its metrics."""
    done = [r for r in level.records if r.ok]
    wall = max(level.ended - level.started, 1e-9)
    tokens = int(sum(r.output_tokens for r in done))
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
        if not r.ok:
            errors[r.error or "incomplete"] += 1
    per_stream = np.array(
        [
            r.output_tokens / (r.end - r.first_token)
            for r in done
            if r.first_token is not None and r.end is not None and r.end > r.first_token
        ]  # type: ignore[operator]
    )
    return LevelMetrics(
        concurrency=level.concurrency,
        output_tok_s=tokens / wall,
        wall_s=wall,
        completed=len(done),
        failed=len(level.records) - len(done),
        output_tokens=tokens,
        ttft_s_p50=_percentile(ttft, 50),
        ttft_s_p99=_percentile(ttft, 99),
        itl_ms_p50=None if not itl.size else float(np.percentile(itl, 50) * 1e3),
        itl_ms_p99=None if not itl.size else float(np.percentile(itl, 99) * 1e3),
        tpot_ms_mean=None if not tpot.size else float(tpot.mean() * 1e3),
        e2e_s_p50=_percentile(e2e, 50),
        per_stream_tok_s=None if not per_stream.size else float(per_stream.mean()),
        errors=dict(errors),
    )
