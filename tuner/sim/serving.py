"""Discrete-event simulation of SGLang's continuous batching under a workload.

The scheduler follows SGLang's loop: each iteration admits waiting requests while
the running-request cap and the KV pool allow (reserving ``new_token_ratio`` of each
request's remaining ``max_tokens``, the ratio decaying from 0.7 as SGLang's does),
prefills them in chunks of ``--chunked-prefill-size`` tokens (decode pauses), then
runs ``--num-continuous-decode-steps`` decode steps in which every running request
gets one token; requests that finish inside an iteration keep their batch slot until
it ends. When the KV pool runs out mid-decode, the requests with the fewest output
tokens are retracted and re-queued, as SGLang does. Those decisions, and the step noise,
are :class:`~tuner.sim.scheduler.SglangScheduler`'s, shared with the realtime emulator;
this module is the event loop around them.

The output is the list of per-request records a real measurement gives, so the same
metrics code reads both. Time jumps from event to event: long stretches of decode are
computed as numpy arrays, which keeps a six-level reference sweep (~700k tokens)
well under a second of CPU.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tuner.metrics import LevelMetrics, summarize
from tuner.request_records import LevelRecords, RequestRecord
from tuner.sim.lengths import SHORT_CHAT_PROMPT_TOKENS, reply_lengths
from tuner.sim.model import PerfModel
from tuner.sim.scheduler import SglangScheduler
from tuner.workload import Workload

#: Default noise: per-launch and per-step relative standard deviation (a few percent).
DEFAULT_NOISE = 0.02
#: How many scheduler iterations one decode segment may span while requests wait, so that
#: admission is checked often enough without a Python loop per step.
MAX_ITERATIONS_PER_SEGMENT_WHEN_WAITING = 4


@dataclass
class _Level:
    arrival: np.ndarray
    prompt: np.ndarray
    target: np.ndarray
    max_tokens: np.ndarray
    generated: np.ndarray = field(init=False)
    first: np.ndarray = field(init=False)
    end: np.ndarray = field(init=False)
    ranges: list[list[tuple[int, int]]] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.arrival)
        self.generated = np.zeros(n, dtype=np.int64)
        self.first = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.ranges = [[] for _ in range(n)]


class ServingSimulator:
    """A launched server: one performance model, warm state and noise across levels."""

    def __init__(self, model: PerfModel, *, seed: int = 0, noise: float = DEFAULT_NOISE):
        self.model = model
        self.rng = np.random.default_rng(seed)
        #: SGLang's decisions; shares the random stream (arrivals, reply lengths, noise).
        self.policy = SglangScheduler(model, rng=self.rng, noise=noise)
        self.clock = 0.0
        self.warm = False
        self.decode_steps = 0

    # --- public -------------------------------------------------------------------------
    def warm_up(self, workload: Workload) -> None:
        """Send the workload's warm-up requests (unrecorded); absorbs the slow first request."""
        for _ in range(workload.warmup_requests):
            self._run(self._burst(1, workload.warmup_max_tokens, workload, ignore_eos=True), None)

    def run_level(self, workload: Workload, concurrency: int) -> LevelRecords:
        """Simulate one concurrency level of the workload; returns its records."""
        max_tokens = workload.max_tokens_for(concurrency)
        t0 = self.clock
        if workload.kind == "burst":
            lvl = self._burst(concurrency, max_tokens, workload, workload.ignore_eos)
            self._run(lvl, None)
            started, ended = t0, float(np.nanmax(lvl.end))
            keep = np.ones(len(lvl.arrival), dtype=bool)
        elif workload.kind == "closed-loop":
            lvl, started, ended = self._closed_loop(concurrency, max_tokens, workload)
            keep = (lvl.end >= started) & (lvl.end <= ended)
        else:
            rate = workload.rate * concurrency
            n = max(1, int(rate * workload.duration_s))
            arrivals = t0 + np.cumsum(self.rng.exponential(1.0 / rate, n))
            lvl = self._requests(arrivals, max_tokens, workload, workload.ignore_eos)
            self._run(lvl, None)
            started, ended = t0, float(np.nanmax(lvl.end))
            keep = np.ones(n, dtype=bool)
        return self._records(lvl, keep, concurrency, started, ended, max_tokens)

    # --- workloads ----------------------------------------------------------------------
    def _requests(self, arrivals: np.ndarray, max_tokens: int, wl: Workload, ignore_eos: bool) -> _Level:
        n = len(arrivals)
        prompt = np.full(n, wl.prompt_tokens or SHORT_CHAT_PROMPT_TOKENS, dtype=np.int64)
        target = reply_lengths(self.rng, n, max_tokens, ignore_eos)
        return _Level(arrivals.astype(float), prompt, target, np.full(n, max_tokens, dtype=np.int64))

    def _burst(self, c: int, max_tokens: int, wl: Workload, ignore_eos: bool) -> _Level:
        return self._requests(np.full(c, self.clock), max_tokens, wl, ignore_eos)

    def _closed_loop(self, c: int, max_tokens: int, wl: Workload) -> tuple[_Level, float, float]:
        t0 = self.clock
        start = t0 + wl.ramp_s
        stop = start + wl.duration_s
        # Upper bound on requests: each client sends at most one per step-time of one token.
        ramp = t0 + (np.arange(c) * wl.ramp_s / c if c > 1 else np.zeros(1))
        lvl = self._requests(ramp, max_tokens, wl, wl.ignore_eos)
        self._run(lvl, stop)
        return lvl, start, stop

    # --- the scheduler loop -----------------------------------------------------------------
    def _run(self, lvl: _Level, closed_loop_stop: float | None) -> None:
        """Advance the server clock until every request of ``lvl`` has finished.

        With ``closed_loop_stop``, each finished request is replaced at once by a new one
        from the same client until that time (the level grows as it runs).
        """
        pm, policy = self.model, self.policy
        steps_per_iter = policy.steps_per_iteration
        chunk = policy.chunked_prefill_size
        # A request reaches the scheduler after its HTTP/tokenizer latency (the model's
        # per-request overhead, counted in its time to first token).
        delay = pm.request_overhead_s
        pending: list[tuple[float, int]] = [(float(a) + delay, i) for i, a in enumerate(lvl.arrival)]
        heapq.heapify(pending)
        waiting: deque[int] = deque()
        running = np.zeros(0, dtype=np.int64)
        kv_len = np.zeros(0, dtype=np.int64)  # KV tokens held by each running request
        policy.reset_ratio()
        t = self.clock
        step_times: list[np.ndarray] = []
        step_base = self.decode_steps
        open_count = len(pending)

        def decode_time_at(k: int) -> float:
            idx = k - step_base
            return float(np.concatenate(step_times)[idx]) if step_times else t

        while open_count:
            while pending and pending[0][0] <= t:
                waiting.append(heapq.heappop(pending)[1])
            # Admission.
            admitted: list[int] = []
            if waiting:
                n_admit = policy.admit(
                    int(kv_len.sum()),
                    lvl.max_tokens[running] - lvl.generated[running],
                    (
                        (int(lvl.prompt[r] + lvl.generated[r]), lvl.max_tokens[r] - lvl.generated[r])
                        for r in waiting
                    ),
                )
                admitted = [waiting.popleft() for _ in range(n_admit)]
            if admitted:
                adm = np.array(admitted, dtype=np.int64)
                need = lvl.prompt[adm] + lvl.generated[adm]
                done_at = np.cumsum(need)
                total = int(done_at[-1])
                extra = 0.0
                if not self.warm:
                    extra, self.warm = pm.first_request_extra_s, True
                t += extra
                pos = 0
                chunk_end_times = []
                while pos < total:
                    n = min(chunk, total - pos)
                    t += policy.step_s(pm.prefill_s(n))
                    pos += n
                    chunk_end_times.append((pos, t))
                # A request's first (next) token arrives when its last prompt chunk is done.
                ends = np.array([c[0] for c in chunk_end_times])
                times = np.array([c[1] for c in chunk_end_times])
                tok_time = times[np.searchsorted(ends, done_at)]
                for r, tt in zip(adm, tok_time, strict=True):
                    if lvl.generated[r] == 0:
                        lvl.first[r] = tt
                    lvl.ranges[r].append((-1, int(tt * 1e9)))  # a prefill-produced token, time in ns
                    lvl.generated[r] += 1
                finished = adm[lvl.generated[adm] >= lvl.target[adm]]
                for r in finished:
                    lvl.end[r] = tok_time[admitted.index(int(r))]
                open_count -= len(finished)
                keep = adm[lvl.generated[adm] < lvl.target[adm]]
                running = np.concatenate([running, keep])
                kv_len = np.concatenate([kv_len, lvl.prompt[keep] + lvl.generated[keep]])
                if closed_loop_stop is not None and len(finished):
                    self._respawn(lvl, finished, pending, closed_loop_stop)
                    open_count += len(lvl.arrival) - len(lvl.ranges) if False else 0
            if not len(running):
                if pending:
                    t = max(t, pending[0][0])
                    continue
                if waiting:
                    continue
                break
            # Decode segment: whole scheduler iterations, stopping at the first finish.
            b = len(running)
            left = lvl.target[running] - lvl.generated[running]
            to_finish = int(left.min())
            iters = -(-to_finish // steps_per_iter)
            if waiting or pending:
                iters = min(iters, MAX_ITERATIONS_PER_SEGMENT_WHEN_WAITING)
            k = iters * steps_per_iter
            k = policy.decode_steps(b, int(kv_len.sum()), k)
            if not k:
                running, kv_len = self._retract(lvl, running, kv_len, waiting)
                continue
            ctx = kv_len.sum() + b * np.arange(k)
            times = t + np.cumsum(policy.steps_s(pm.decode_step_s(b, ctx)))
            if pending:
                # Stop at the iteration boundary after the next arrival.
                cut = int(np.searchsorted(times, pending[0][0]))
                if cut < k:
                    k = min(k, (cut // steps_per_iter + 1) * steps_per_iter)
                    times = times[:k]
            gen_now = np.minimum(left, k)
            first_step = self.decode_steps
            step_times.append(times)
            self.decode_steps += k
            t = float(times[-1])
            for r, g in zip(running.tolist(), gen_now.tolist(), strict=True):
                lvl.ranges[r].append((first_step, g))
            lvl.generated[running] += gen_now
            kv_len = kv_len + gen_now
            policy.decayed(k)
            done = lvl.generated[running] >= lvl.target[running]
            if done.any():
                fin = running[done]
                lvl.end[fin] = times[gen_now[done] - 1]
                open_count -= len(fin)
                running, kv_len = running[~done], kv_len[~done]
                if closed_loop_stop is not None:
                    added = self._respawn(lvl, fin, pending, closed_loop_stop)
                    open_count += added
        self.clock = t
        self._assemble_tokens(lvl, np.concatenate(step_times) if step_times else np.zeros(0), step_base)

    def _respawn(self, lvl: _Level, finished: np.ndarray, pending: list, stop: float) -> int:
        """Closed loop: each finished client sends its next request at once (until ``stop``)."""
        ends = lvl.end[finished]
        ends = ends[ends < stop]
        if not len(ends):
            return 0
        n0 = len(lvl.arrival)
        extra = len(ends)
        target = reply_lengths(self.rng, extra, int(lvl.max_tokens[0]), False)
        lvl.arrival = np.concatenate([lvl.arrival, ends])
        lvl.prompt = np.concatenate([lvl.prompt, np.full(extra, lvl.prompt[0])])
        lvl.target = np.concatenate(
            [
                lvl.target,
                target if not np.all(lvl.target == lvl.max_tokens[0]) else np.full(extra, lvl.max_tokens[0]),
            ]
        )
        lvl.max_tokens = np.concatenate([lvl.max_tokens, np.full(extra, lvl.max_tokens[0])])
        lvl.generated = np.concatenate([lvl.generated, np.zeros(extra, dtype=np.int64)])
        lvl.first = np.concatenate([lvl.first, np.full(extra, np.nan)])
        lvl.end = np.concatenate([lvl.end, np.full(extra, np.nan)])
        lvl.ranges.extend([] for _ in range(extra))
        for i, a in enumerate(ends):
            heapq.heappush(pending, (float(a) + self.model.request_overhead_s, n0 + i))
        return extra

    def _retract(
        self, lvl: _Level, running: np.ndarray, kv_len: np.ndarray, waiting: deque
    ) -> tuple[np.ndarray, np.ndarray]:
        """Free KV as the policy says: its victims go back to the head of the queue."""
        keep = np.ones(len(running), dtype=bool)
        for i in self.policy.retract(lvl.generated[running], kv_len, int(kv_len.sum())):
            keep[i] = False
            waiting.appendleft(int(running[i]))
        return running[keep], kv_len[keep]

    def _assemble_tokens(self, lvl: _Level, steps: np.ndarray, base: int) -> None:
        self._token_times = []
        for ranges in lvl.ranges:
            parts = []
            for start, count in ranges:
                if start < 0:
                    parts.append(np.array([count * 1e-9]))
                elif count:
                    parts.append(steps[start - base : start - base + count])
            self._token_times.append(np.concatenate(parts) if parts else np.zeros(0))

    def _records(
        self, lvl: _Level, keep: np.ndarray, c: int, started: float, ended: float, max_tokens: int
    ) -> LevelRecords:
        recs = []
        for i in np.flatnonzero(keep):
            recs.append(
                RequestRecord(
                    start=float(lvl.arrival[i]),
                    end=float(lvl.end[i]),
                    first_token=float(lvl.first[i]),
                    output_tokens=int(lvl.generated[i]),
                    prompt_tokens=int(lvl.prompt[i]),
                    token_times=self._token_times[i],
                )
            )
        return LevelRecords(concurrency=c, records=recs, started=started, ended=ended, max_tokens=max_tokens)


def simulate_sweep(
    model: PerfModel,
    workload: Workload,
    *,
    seed: int = 0,
    noise: float = DEFAULT_NOISE,
    on_level: Callable[[LevelMetrics], bool | None] | None = None,
) -> list[LevelRecords]:
    """Warm up, then run the workload's levels lowest first on one launched server.

    ``on_level`` sees each level's metrics; returning ``False`` stops the sweep (pruning).
    """
    sim = ServingSimulator(model, seed=seed, noise=noise)
    sim.warm_up(workload)
    out = []
    for c in workload.levels:
        level = sim.run_level(workload, c)
        out.append(level)
        if on_level is not None and on_level(summarize(level)) is False:
            break
    return out
