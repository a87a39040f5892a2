"""Stopping a burst level before it drains, once it cannot reach the bar it is held to.

The pruner (:mod:`tuner.pruning`) judges a trial after each *finished* level, so a trial it
prunes has already paid for the level that condemned it: on the reference host an EPLB
launch streams its single request at ~8 tok/s for a minute where the best takes 5 s, and a
configuration at 60% of the best drains a C=256 burst for ~300 s where the best takes ~185 s.
A person watching the sweep would stop both long before the end. This module is that
person: while a burst level runs, its records so far are checked against a bar
(:class:`LevelBar`, set by the study as the level starts), and a level that cannot reach
it even on a generous projection is stopped there, with the projection as its value. The
study sets two bars (:meth:`tuner.study.Search._level_bar`): the pruner's, below which the
trial is pruned as it would have been after the level; and, for a peak objective, the
peak the launch has measured already, which a level that cannot raise it cannot change
(a finalist's C=32 level on the reference target), so it is cut short and the sweep goes on.

The projection. Every trial of a study serves the same requests (common random numbers),
so a level streams as many tokens as the reference level did (``LevelBar.tokens``). After
``elapsed`` seconds a level has streamed ``done`` of them; the rest at the highest rate
the level has reached so far (:func:`peak_rate`, over stretches of
:data:`PEAK_WINDOW_SHARE` of the reference's time) would end it at
``elapsed + (tokens - done) / rate``. The highest rate, not the latest: SGLang runs
prefill before decode, so a burst of long prompts alternates stretches that only prefill
(almost no tokens stream) with stretches that decode a full batch, and a rate read in
the wrong stretch would condemn a configuration that decodes fast. A level is judged only
once its prefill has been behind it (:func:`steady_since`: every request streams, or the
batch has started to turn over) for :data:`JUDGE_AFTER_SHARE` of the reference level's
time, so that its peak rate has been seen: a burst of long prompts on a PCIe host
prefills every prompt before its first decode step, and a single stream's first tokens
say nothing of its pace. A burst's rate falls as requests
finish (the tail) and as contexts grow, and the remaining prefill is counted as free, so
this end is early and the projected value optimistic: a level stopped on it would have
ended below the bar.

Only bursts are watched: a closed-loop window lasts as long whatever the server does,
and an open-loop level's length is set by its arrivals, so stopping either saves little.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from tuner.metrics import tokens_in_window
from tuner.request_records import CUT_AT_WINDOW_END, LevelRecords, RequestRecord

#: A level is judged no earlier than this share of the reference level's wall time: a
#: quarter leaves a hopeless level's last three quarters, and everything past the
#: reference's end, to save.
JUDGE_AFTER_SHARE = 0.25
#: How often a running level is judged, as a share of the reference level's wall time (on
#: the reference host every ~9 s of a C=256 burst, every ~0.25 s of a single stream)...
CHECK_SHARE = 0.05
#: ... and at least this many seconds apart on a real host (each check reads every record).
CHECK_MIN_S = 1.0
#: The stretch a level's peak rate is read over, as a share of the reference level's wall
#: time: shorter than the decode stretches of a burst of long prompts (tens of seconds on a
#: PCIe host). ``python benchmarks/level_watch.py``: at 5% no level of 336 stopped over eight
#: spaces would have reached its bar, the lowest projection 0.99 of the level's whole run;
#: at 10%, as many stops and none false, but projections down to 0.92 of the whole run.
PEAK_WINDOW_SHARE = 0.05


@dataclass(frozen=True)
class LevelBar:
    """What a level must be able to reach to go on: the pruner's bar at that level
    (``bar_tok_s``), and the reference level it derives from (the best trial's level:
    the tokens it streamed and its wall time)."""

    bar_tok_s: float
    tokens: int
    wall_s: float

    @property
    def judge_after_s(self) -> float:
        return JUDGE_AFTER_SHARE * self.wall_s

    @property
    def every_s(self) -> float:
        return CHECK_SHARE * self.wall_s


#: Asked as each level starts, with (level index, concurrency): the bar that level must be
#: able to reach, or None (the level is not watched).
LevelWatch = Callable[[int, int], "LevelBar | None"]


def cut(level: LevelRecords, at: float) -> LevelRecords:
    """The level's records as a client saw them at ``at`` (a time on the records' clock):
    tokens after it removed, and a request still streaming then marked as cut (its tokens
    so far count, as at the close of a closed-loop window). Requests not sent by then are
    left out."""
    records: list[RequestRecord] = []
    for r in level.records:
        if r.start > at:
            continue
        if r.end is not None and r.end <= at:
            records.append(r)
            continue
        times = r.token_times
        seen = times[times <= at] if times is not None else np.zeros(0)
        per_chunk = r.output_tokens / len(times) if times is not None and len(times) and r.ok else 1.0
        records.append(
            RequestRecord(
                start=r.start,
                first_token=float(seen[0]) if len(seen) else None,
                output_tokens=round(len(seen) * per_chunk),
                prompt_tokens=r.prompt_tokens,
                token_times=seen,
                error=CUT_AT_WINDOW_END,
            )
        )
    return replace(level, records=records, ended=at, window=True)


def steady_since(so_far: LevelRecords) -> float | None:
    """When the level's prefill was behind it, on the records so far: once every request
    streams (their prompts are all in), or, where the batch admits requests only as others
    finish, at the first finish; None before either (a burst of long prompts spends its
    start prefilling, and its first tokens say nothing of its decode rate)."""
    if not so_far.records:
        return None
    firsts = [r.first_token for r in so_far.records]
    if all(f is not None for f in firsts):
        return max(firsts)  # type: ignore[type-var]
    ends = [r.end for r in so_far.records if r.ok and r.end is not None]
    return min(ends) if ends else None


def peak_rate(so_far: LevelRecords, width_s: float) -> float:
    """The level's highest throughput over any stretch of ``width_s`` seconds so far (tok/s;
    stretches counted back from the latest record)."""
    streams = [r.token_times for r in so_far.records if r.token_times is not None and len(r.token_times)]
    if not streams:
        return 0.0
    times = np.concatenate(streams)
    times = times[(times >= so_far.started) & (times <= so_far.ended)]
    bins = int((so_far.ended - so_far.started) // width_s)
    if not len(times) or bins < 1:
        return 0.0
    counts, _ = np.histogram(times, bins=bins, range=(so_far.ended - bins * width_s, so_far.ended))
    return float(counts.max()) * tokens_in_window(so_far) / len(times) / width_s


def projected_tok_s(so_far: LevelRecords, bar: LevelBar) -> float | None:
    """An optimistic projection of the level's throughput from its records so far (see the
    module docstring); None while it is too early to judge."""
    elapsed = so_far.ended - so_far.started
    since = steady_since(so_far)
    if elapsed < bar.judge_after_s or since is None or so_far.ended - since < bar.judge_after_s:
        return None
    done = tokens_in_window(so_far)
    if done >= bar.tokens:
        return done / elapsed
    rate = peak_rate(so_far, PEAK_WINDOW_SHARE * bar.wall_s)
    if rate <= 0:
        return None
    return bar.tokens / (elapsed + (bar.tokens - done) / rate)


def falls_short(so_far: LevelRecords, bar: LevelBar) -> float | None:
    """The projected throughput when the level cannot reach the bar; None when it may (or
    it is too early to say)."""
    value = projected_tok_s(so_far, bar)
    return value if value is not None and value < bar.bar_tok_s else None


def checkpoints(started: float, ended: float, bar: LevelBar, every_s: float) -> Iterator[float]:
    """The times a level running from ``started`` is judged at, before ``ended``."""
    step = max(every_s, 1e-6)
    t = started + max(bar.judge_after_s, step)
    while t < ended:
        yield t
        t += step


def replay(level: LevelRecords, bar: LevelBar) -> LevelRecords:
    """A finished level as it would have been watched while it ran (the simulator computes a
    level whole): the records stopped at the first check where it fell short of the bar, or
    the level itself."""
    if level.window:
        return level
    for at in checkpoints(level.started, level.ended, bar, bar.every_s):
        so_far = cut(level, at)
        value = falls_short(so_far, bar)
        if value is not None:
            return replace(so_far, projected_tok_s=value)
    return level
