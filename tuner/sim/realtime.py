"""Continuous batching in real time: the scheduler of the SGLang-compatible emulator.

One asyncio task (:meth:`RealtimeEngine.run`) plays SGLang's scheduler loop over every
open request, with the same rules as the discrete-event simulation
(:mod:`tuner.sim.serving`): admission at iteration boundaries while the running-request
cap and the KV pool allow (reserving ``new_token_ratio`` of each request's remaining
``max_tokens``), chunked prefill of the admitted requests (decode pauses), then
``--num-continuous-decode-steps`` decode steps in which every running request gets one
token; a request that finishes inside an iteration keeps its batch slot until the
iteration ends; when the KV pool runs out the requests with the fewest output tokens
are retracted and re-queued. Those decisions are
:class:`~tuner.sim.scheduler.SglangScheduler`'s, the same object the simulation asks.

Each step lasts what :class:`~tuner.sim.model.PerfModel` says, divided by ``speedup``.
The loop keeps a virtual clock and computes steps ahead of real time for at most one
*flush interval*, then sleeps until the virtual clock is due and releases the tokens of
those steps to their streams at once. Tokens are therefore never early, at most one
flush interval late, and a stream whose steps are shorter than the flush interval gets
several tokens per chunk (usage still counts every token). The flush interval grows
with the number of open streams so that the HTTP layer never has to send more than
``max_chunks_per_s`` chunks per second, which keeps the emulator's CPU cost bounded at
any speedup. The price: a request that arrives while steps are computed ahead joins at
the next iteration boundary after them, up to one flush interval (real time) late, and
ITLs are measured per chunk; at speedup 1 the steps are longer than the interval and
every step is its own chunk.

Admission is checked at every iteration boundary, as SGLang's scheduler does; the
discrete-event simulation checks it at most every few iterations while requests wait
(a speed-up of its own), so under KV pressure the two can differ by a few percent.

Per-token work is O(1): a running request's token count is derived from the global
decode-step counter (``generated = gen_fixed + steps - g0``), finishes come off a heap,
and only a flush touches every open stream.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from tuner.sim.lengths import reply_lengths
from tuner.sim.model import PerfModel
from tuner.sim.scheduler import SglangScheduler

#: Shortest real time between two chunks of one stream (seconds): steps shorter than
#: this are coalesced into one chunk. 2 ms is below any ITL a client cares about.
DEFAULT_CHUNK_INTERVAL_S = 0.002
#: Cap on chunks per second over all streams; the flush interval grows beyond
#: ``DEFAULT_CHUNK_INTERVAL_S`` when ``open streams / interval`` would exceed it. One core
#: of the HTTP layer sends ~10k chunks/s (uvicorn + h11, measured), so 5k leaves headroom.
DEFAULT_MAX_CHUNKS_PER_S = 5_000.0
#: How far (real seconds) the loop may fall behind its virtual clock before it gives up
#: on catching up; the debt it drops is reported as ``lag_s`` (the emulator, not the
#: model, set the pace for that long).
MAX_CATCH_UP_S = 0.05


@dataclass(slots=True, eq=False)
class Generation:
    """One request inside the engine, and the hand-off point to its HTTP stream.

    ``visible`` is how many tokens have been released to the client; ``event`` is set
    whenever it grows, the request finishes (``done``) or is cancelled.
    """

    rid: int
    prompt_tokens: int
    max_tokens: int
    target: int
    arrival: float
    #: when the scheduler sees it: arrival plus the model's per-request overhead (HTTP,
    #: tokenizer), which delays this request and not the batch
    ready: float = 0.0
    event: asyncio.Event = field(default_factory=asyncio.Event)
    #: tokens generated as of decode step ``g0`` (``g0 < 0``: not in the running batch)
    gen_fixed: int = 0
    g0: int = -1
    visible: int = 0
    finished: bool = False
    done: bool = False
    cancelled: bool = False
    #: waiting | prefill | running | finished
    state: str = "waiting"

    @property
    def finish_reason(self) -> str:
        """``length`` when the reply was cut at ``max_tokens``, else ``stop`` (EOS)."""
        return "length" if self.target >= self.max_tokens else "stop"


@dataclass(slots=True)
class EngineStats:
    """The emulator's own accounting (``/server_info`` -> ``emulator``)."""

    submitted: int = 0
    finished: int = 0
    cancelled: int = 0
    retracted: int = 0
    #: tokens released to clients (what a client's usage counts add up to)
    output_tokens: int = 0
    prompt_tokens: int = 0
    decode_steps: int = 0
    prefill_chunks: int = 0
    flushes: int = 0
    #: model seconds of all steps (before the speedup)
    model_busy_s: float = 0.0
    #: real seconds with at least one request in the engine
    busy_wall_s: float = 0.0
    #: start and end (``time.perf_counter``, i.e. CLOCK_MONOTONIC: comparable across
    #: processes on one host) of the last busy period
    busy_start: float = 0.0
    busy_end: float = 0.0
    #: real seconds the loop fell behind its model and did not catch up
    lag_s: float = 0.0
    max_running: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


#: What decides a reply's length (the first element of ``RealtimeEngine.submit``'s ``reply``
#: and of its random stream): nothing but the request itself, a sampling seed, the prompt.
SAMPLED, SEEDED, GREEDY = 0, 1, 2


class RealtimeEngine:
    """SGLang's continuous batching paced in real time from a performance model."""

    def __init__(
        self,
        perf: PerfModel,
        *,
        speedup: float = 1.0,
        seed: int = 0,
        noise: float = 0.0,
        chunk_interval_s: float = DEFAULT_CHUNK_INTERVAL_S,
        max_chunks_per_s: float = DEFAULT_MAX_CHUNKS_PER_S,
        clock: Callable[[], float] = time.perf_counter,
    ):
        if speedup <= 0:
            raise ValueError("speedup must be positive")
        self.perf = perf
        self.speedup = speedup
        self.seed = seed
        self.noise = noise
        self.chunk_interval_s = chunk_interval_s
        self.max_chunks_per_s = max_chunks_per_s
        self.clock = clock
        self.stats = EngineStats()
        #: SGLang's decisions (admission, retraction, step noise).
        self.policy = SglangScheduler(perf, rng=np.random.default_rng(seed), noise=noise)
        self._waiting: deque[Generation] = deque()
        self._running: dict[int, Generation] = {}
        self._finish_heap: list[tuple[int, int, int, Generation]] = []  # (step, rid, g0, gen)
        self._kv_sum = 0  # sum of prompt + generated over the running batch, at a boundary
        self._steps = 0
        self._warm = False
        self._released: list[Generation] = []  # not running, but with tokens to release
        self._cancelled_running: list[Generation] = []
        self._cancelled_waiting = 0
        self._open: dict[int, Generation] = {}
        self._next_rid = 0
        self._wake: asyncio.Event | None = None
        self._busy_since: float | None = None
        self._t_v = 0.0
        self._last_flush_v = 0.0

    # --- client side ----------------------------------------------------------------------
    def submit(
        self,
        prompt_tokens: int,
        max_tokens: int,
        *,
        ignore_eos: bool = False,
        reply: tuple[int, int] | None = None,
    ) -> Generation:
        """Queue a request; its reply length is drawn now, from ``reply``: (:data:`GREEDY`,
        a digest of the prompt) for a greedy request, so the same prompt gets the same reply
        in whatever order requests arrive; (:data:`SEEDED`, the request's sampling seed);
        or None, a draw of its own per request (sampled decoding)."""
        rid = self._next_rid
        self._next_rid += 1
        rng = np.random.default_rng([self.seed, *(reply or (SAMPLED, rid))])
        target = int(reply_lengths(rng, 1, max_tokens, ignore_eos)[0])
        gen = Generation(
            rid=rid,
            prompt_tokens=max(1, int(prompt_tokens)),
            max_tokens=max_tokens,
            target=target,
            arrival=self.clock(),
        )
        gen.ready = gen.arrival + self.perf.request_overhead_s / self.speedup
        self._waiting.append(gen)
        self._open[rid] = gen
        self.stats.submitted += 1
        self.stats.prompt_tokens += gen.prompt_tokens
        if self._busy_since is None:
            self._busy_since = self.stats.busy_start = gen.arrival
        if self._wake is not None:
            self._wake.set()
        return gen

    def cancel(self, gen: Generation) -> None:
        """The client went away: drop the request (at the next iteration boundary if it is
        in the running batch, as SGLang aborts between iterations)."""
        if gen.done or gen.cancelled:
            return
        gen.cancelled = True
        self._open.pop(gen.rid, None)
        self.stats.cancelled += 1
        if gen.state == "running":
            self._cancelled_running.append(gen)
        elif gen.state == "waiting":
            self._cancelled_waiting += 1
        gen.event.set()

    def cancel_all(self) -> None:
        """Cancel every open request (server shutdown)."""
        for gen in list(self._open.values()):
            self.cancel(gen)

    @property
    def open_requests(self) -> int:
        return len(self._waiting) + len(self._running)

    # --- the loop -------------------------------------------------------------------------
    async def run(self) -> None:
        """The scheduler loop; runs until cancelled."""
        self._wake = asyncio.Event()
        while True:
            self._drop_cancelled_waiting()
            if not self._running and not self._waiting:
                self._flush()
                self._go_idle()
                self._wake.clear()
                await self._wake.wait()
                self._t_v = self._last_flush_v = self.clock()
                continue
            admitted = self._admit()
            if admitted:
                await self._prefill(admitted)
            if not self._running:
                await self._until_ready()
                continue
            await self._decode_iteration()

    def _go_idle(self) -> None:
        if self._busy_since is not None:
            self.stats.busy_end = self.clock()
            self.stats.busy_wall_s += max(0.0, self.stats.busy_end - self._busy_since)
            self._busy_since = None

    def _drop_cancelled_waiting(self) -> None:
        if self._cancelled_waiting:
            self._waiting = deque(g for g in self._waiting if not g.cancelled)
            self._cancelled_waiting = 0

    def _generated(self, g: Generation) -> int:
        if g.g0 < 0:
            return g.gen_fixed
        return min(g.target, g.gen_fixed + self._steps - g.g0)

    def _admit(self) -> list[Generation]:
        """SGLang's admission: running cap, and the KV pool with new-token reservations."""
        running = self._running.values()
        if not self._waiting or not self.policy.has_room(len(running)):
            return []
        n = self.policy.admit(
            self._kv_sum,
            np.fromiter((g.max_tokens - self._generated(g) for g in running), np.int64, len(running)),
            (
                (g.prompt_tokens + g.gen_fixed, g.max_tokens - g.gen_fixed)
                # the queue is in arrival order: admission stops at the first request still in
                # its per-request overhead (not yet seen by the scheduler)
                for g in itertools.takewhile(lambda g: g.ready <= self._t_v, self._waiting)
                if not g.cancelled
            ),
        )
        admitted: list[Generation] = []
        while len(admitted) < n:
            g = self._waiting.popleft()
            if g.cancelled:
                self._cancelled_waiting = max(0, self._cancelled_waiting - 1)
                continue
            g.state = "prefill"
            admitted.append(g)
        if admitted:
            # A request is admitted no earlier than it arrived (matters only when the loop
            # has fallen behind real time).
            self._t_v = max(self._t_v, max(g.arrival for g in admitted))
        return admitted

    async def _until_ready(self) -> None:
        """Nothing runs and the first waiting request is still in its per-request overhead:
        wait for it (the clock moves on to when the scheduler sees it)."""
        if self._waiting and self._waiting[0].ready > self._t_v:
            ready = self._waiting[0].ready
            await asyncio.sleep(max(0.0, ready - self.clock()))
            self._t_v = max(self._t_v, ready)

    async def _prefill(self, admitted: list[Generation]) -> None:
        """Prefill the admitted requests (plus the output of retracted ones) in chunks; each
        request's next token comes at the end of the chunk holding its last prompt token."""
        pm = self.perf
        if not self._warm:
            self._warm = True
            self._advance(pm.first_request_extra_s)
        needs = [g.prompt_tokens + g.gen_fixed for g in admitted]
        total = sum(needs)
        pos, i, cum = 0, 0, needs[0]
        while pos < total:
            n = min(self.policy.chunked_prefill_size, total - pos)
            self._advance(self.policy.step_s(float(pm.prefill_s(n))))
            self.stats.prefill_chunks += 1
            pos += n
            while i < len(admitted) and cum <= pos:
                g = admitted[i]
                if not g.cancelled:
                    g.gen_fixed += 1
                    self._released.append(g)
                i += 1
                if i < len(admitted):
                    cum += needs[i]
            await self._pace()
        for g in admitted:
            if g.cancelled:
                continue
            if g.gen_fixed >= g.target:
                self._finish(g)
                continue
            g.g0 = self._steps
            g.state = "running"
            self._running[g.rid] = g
            self._kv_sum += g.prompt_tokens + g.gen_fixed
            heapq.heappush(self._finish_heap, (g.g0 + g.target - g.gen_fixed, g.rid, g.g0, g))
        self.stats.max_running = max(self.stats.max_running, len(self._running))

    def _finish(self, g: Generation) -> None:
        g.finished = True
        g.state = "finished"
        self.stats.finished += 1
        self._released.append(g)

    async def _decode_iteration(self) -> None:
        """``num_continuous_decode_steps`` decode steps of the running batch."""
        b = len(self._running)
        k = self.policy.decode_steps(b, self._kv_sum, self.policy.steps_per_iteration)
        if not k:
            self._retract()
            return
        pm, heap = self.perf, self._finish_heap
        start_steps = self._steps
        kv0 = self._kv_sum
        ended: list[Generation] = []
        for j in range(k):
            self._advance(self.policy.step_s(float(pm.decode_step_s(b, kv0 + b * j))))
            self._steps += 1
            self.stats.decode_steps += 1
            while heap and heap[0][0] <= self._steps:
                _, rid, g0, g = heapq.heappop(heap)
                if g.g0 == g0 and self._running.get(rid) is g and not g.finished:
                    ended.append(g)
                    if not g.cancelled:
                        self._finish(g)
            await self._pace()
        # Iteration boundary: finished and cancelled requests leave the batch.
        self.policy.decayed(k)
        gone = ended + [g for g in self._cancelled_running if not g.finished]
        self._cancelled_running.clear()
        kv = kv0 + b * k
        for g in gone:
            if self._running.pop(g.rid, None) is None:
                continue
            gen_start = min(g.target, g.gen_fixed + start_steps - g.g0)
            kv -= g.prompt_tokens + gen_start + k
            g.gen_fixed = min(g.target, g.gen_fixed + self._steps - g.g0)
            g.g0 = -1
            if g.cancelled:
                g.done = True
        self._kv_sum = kv

    def _retract(self) -> None:
        """Free KV as the policy says: its victims go back to the head of the queue, in
        retraction order, with the tokens they have (re-prefilled on admission)."""
        batch = list(self._running.values())
        generated = np.array([self._generated(g) for g in batch], dtype=np.int64)
        kv = np.array([g.prompt_tokens for g in batch], dtype=np.int64) + generated
        requeue = []
        for i in self.policy.retract(generated, kv, self._kv_sum):
            g = batch[i]
            self._kv_sum -= int(kv[i])
            del self._running[g.rid]
            g.gen_fixed, g.g0, g.state = int(generated[i]), -1, "waiting"
            requeue.append(g)
            self.stats.retracted += 1
        self._waiting.extendleft(reversed(requeue))

    # --- pacing and release ---------------------------------------------------------------
    def _advance(self, model_s: float) -> None:
        self.stats.model_busy_s += model_s
        self._t_v += model_s / self.speedup

    def flush_interval_s(self) -> float:
        """Real seconds between releases: at least ``chunk_interval_s``, and long enough that
        the open streams get at most ``max_chunks_per_s`` chunks per second together."""
        streams = len(self._running) + len(self._released)
        if self.max_chunks_per_s > 0:
            return max(self.chunk_interval_s, streams / self.max_chunks_per_s)
        return self.chunk_interval_s

    async def _pace(self) -> None:
        """Release the tokens computed so far once a flush interval of virtual time has
        accumulated: sleep until the virtual clock is due, then flush."""
        if self._t_v - self._last_flush_v < self.flush_interval_s():
            return
        now = self.clock()
        if self._t_v > now:
            await asyncio.sleep(self._t_v - now)
        else:
            if now - self._t_v > MAX_CATCH_UP_S:
                self.stats.lag_s += now - self._t_v - MAX_CATCH_UP_S
                self._t_v = now - MAX_CATCH_UP_S
            await asyncio.sleep(0)
        self._flush()
        self._last_flush_v = self._t_v

    def _flush(self) -> None:
        """Hand every stream the tokens it has by now and wake it."""
        self.stats.flushes += 1
        released = 0
        for group in (self._running.values(), self._released):
            for g in group:
                if g.cancelled:
                    continue
                v = self._generated(g)
                if v != g.visible or (g.finished and not g.done):
                    released += v - g.visible
                    g.visible = v
                    if g.finished:
                        g.done = True
                        self._open.pop(g.rid, None)
                    g.event.set()
        self._released.clear()
        self.stats.output_tokens += released
