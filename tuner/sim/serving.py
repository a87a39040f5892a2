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
from dataclasses import dataclass, field, replace

import numpy as np

from tuner.metrics import LevelMetrics, summarize
from tuner.request_records import LevelRecords, RequestRecord
from tuner.sim.lengths import reply_lengths
from tuner.sim.model import PerfModel
from tuner.sim.scheduler import SglangScheduler
from tuner.workload import SHORT_PROMPT_TOKENS, LevelPlan, Workload

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
    #: the plan the requests come from, and the index of the next one a closed loop sends
    plan: LevelPlan
    next_index: int
    generated: np.ndarray = field(init=False)
    refused: np.ndarray = field(init=False)
    first: np.ndarray = field(init=False)
    end: np.ndarray = field(init=False)
    ranges: list[list[tuple[int, int]]] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.arrival)
        self.generated = np.zeros(n, dtype=np.int64)
        self.refused = np.zeros(n, dtype=bool)
        self.first = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.ranges = [[] for _ in range(n)]


class ServingSimulator:
    """A launched server: one performance model, warm state and noise across levels."""

    def __init__(
        self,
        model: PerfModel,
        *,
        seed: int = 0,
        noise: float = DEFAULT_NOISE,
        requests_seed: int | None = None,
        launch_factor: float | None = None,
    ):
        self.model = model
        self.rng = np.random.default_rng(seed)
        #: SGLang's decisions (the per-launch factor, step noise), drawn from the launch's stream.
        self.policy = SglangScheduler(model, rng=self.rng, noise=noise, launch_factor=launch_factor)
        #: Seed of the request set (arrivals, prompt and reply lengths), drawn per level from
        #: ``[requests_seed, concurrency]`` as the load generator draws its prompts, so two
        #: launches given the same one serve the same requests; None: from the launch's stream.
        self.requests_seed = requests_seed
        self.clock = 0.0
        self.warm = False
        self.decode_steps = 0

    # --- public -------------------------------------------------------------------------
    def warm_up(self, workload: Workload) -> None:
        """Send the workload's warm-up requests (unrecorded); absorbs the slow first request."""
        warm = Workload(levels=(1,), single_max_tokens=workload.warmup_max_tokens, ignore_eos=True)
        for _ in range(workload.warmup_requests):
            plan = warm.plan(1, self.rng)
            self._run(self._requests(np.full(1, self.clock), plan, np.arange(1)), None)

    def run_level(self, workload: Workload, concurrency: int) -> LevelRecords:
        """Simulate one level of the workload (the requests :meth:`Workload.plan` says);
        returns its records."""
        rng = self.rng
        if self.requests_seed is not None:
            rng = np.random.default_rng([self.requests_seed, concurrency])
        plan = workload.plan(concurrency, rng)
        if plan.output_tokens is None:
            # A reply's length is the request's (the model ends it), whichever server serves
            # it, and a request a closed loop sends again gets the same reply.
            plan = replace(plan, output_tokens=reply_lengths(rng, len(plan), plan.max_tokens, False))
        t0 = self.clock
        window = False
        if plan.mode == "closed-loop":
            lvl, started, ended = self._closed_loop(plan, workload)
            # Every request that streamed inside the window counts its tokens there.
            keep = (lvl.first <= ended) & (lvl.end >= started)
            window = True
        else:
            offsets = np.zeros(len(plan)) if plan.arrivals is None else plan.arrivals
            lvl = self._requests(t0 + offsets, plan, np.arange(len(plan)))
            self._run(lvl, None)
            started, ended = t0, float(np.nanmax(lvl.end))
            keep = np.ones(len(lvl.arrival), dtype=bool)
        records = self._records(lvl, keep, concurrency, started, ended, int(plan.max_tokens.max()))
        records.window = window
        return records

    # --- workloads ----------------------------------------------------------------------
    def _requests(self, arrivals: np.ndarray, plan: LevelPlan, idx: np.ndarray) -> _Level:
        """Requests ``idx`` of a plan (indices wrap: a closed loop cycles through it)."""
        idx = idx % len(plan)
        max_tokens = plan.max_tokens[idx]
        if plan.prompt_tokens is None:
            prompt = np.full(len(idx), SHORT_PROMPT_TOKENS, dtype=np.int64)
        else:
            prompt = plan.prompt_tokens[idx]
        assert plan.output_tokens is not None, "run_level draws the natural reply lengths"
        target = plan.output_tokens[idx]
        return _Level(arrivals.astype(float), prompt, target, max_tokens.astype(np.int64), plan, len(idx))

    def _closed_loop(self, plan: LevelPlan, wl: Workload) -> tuple[_Level, float, float]:
        c, t0 = plan.concurrency, self.clock
        start = t0 + wl.ramp_s
        stop = start + wl.duration_s
        ramp = t0 + (np.arange(c) * wl.ramp_s / c if c > 1 else np.zeros(1))
        lvl = self._requests(ramp, plan, np.arange(c))
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
                    open_count += self._respawn(lvl, finished, pending, closed_loop_stop)
            if not len(running):
                if waiting and not admitted:
                    # Nothing runs and the head of the queue still does not fit: its prompt
                    # is larger than the whole KV pool. SGLang refuses such a request (the
                    # emulator answers 400); it fails at once instead of waiting forever.
                    r = waiting.popleft()
                    lvl.end[r], lvl.refused[r] = t, True
                    open_count -= 1
                    if closed_loop_stop is not None:
                        open_count += self._respawn(lvl, np.array([r]), pending, closed_loop_stop)
                    continue
                if pending:
                    t = max(t, pending[0][0])
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
            times = t + np.cumsum(policy.steps_s(np.asarray(pm.decode_step_s(b, ctx))))
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
        """Closed loop: each finished client sends the plan's next request at once (until
        ``stop``)."""
        ends = lvl.end[finished]
        ends = ends[ends < stop]
        if not len(ends):
            return 0
        n0 = len(lvl.arrival)
        extra = len(ends)
        new = self._requests(ends, lvl.plan, np.arange(lvl.next_index, lvl.next_index + extra))
        lvl.next_index += extra
        lvl.arrival = np.concatenate([lvl.arrival, new.arrival])
        lvl.prompt = np.concatenate([lvl.prompt, new.prompt])
        lvl.target = np.concatenate([lvl.target, new.target])
        lvl.max_tokens = np.concatenate([lvl.max_tokens, new.max_tokens])
        lvl.generated = np.concatenate([lvl.generated, new.generated])
        lvl.refused = np.concatenate([lvl.refused, new.refused])
        lvl.first = np.concatenate([lvl.first, new.first])
        lvl.end = np.concatenate([lvl.end, new.end])
        lvl.ranges.extend(new.ranges)
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
                    error="http-400" if lvl.refused[i] else None,
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
    requests_seed: int | None = None,
    launch_factor: float | None = None,
) -> list[LevelRecords]:
    """Warm up, then run the workload's levels lowest first on one launched server.

    ``on_level`` sees each level's metrics; returning ``False`` stops the sweep (pruning).
    ``requests_seed`` fixes the request set (see :class:`ServingSimulator`);
    ``launch_factor`` the launch's speed (every step scaled by it) instead of drawing it.
    """
    sim = ServingSimulator(
        model, seed=seed, noise=noise, requests_seed=requests_seed, launch_factor=launch_factor
    )
    sim.warm_up(workload)
    out = []
    for c in workload.levels:
        level = sim.run_level(workload, c)
        out.append(level)
        if on_level is not None and on_level(summarize(level)) is False:
            break
    return out
