"""A concurrency sweep against a server: warm-up, then levels lowest first, each driven
as its workload says.

* ``burst``: C requests at once; the level's wall runs from the first send to the last
  finish, or to the check that found it short of its bar (a watched level, :mod:`tuner.level_watch`).
* ``closed-loop`` (and a trace replayed closed-loop): C clients each keep one request in
  flight; clients start staggered over ``ramp_s``; the level's wall is the ``duration_s``
  window after the ramp, and every token streamed inside it counts, including those of
  requests still streaming when it closes (:data:`~tuner.request_records.CUT_AT_WINDOW_END`).
* ``poisson`` (and a trace replayed at its timestamps): open loop, the requests of the
  level's plan sent at their arrival offsets; every request counts; the wall runs from the
  start to the last finish.

What each request asks for (prompt, ``max_tokens``, ``ignore_eos``) comes from the
workload's plan (:meth:`~tuner.workload.Workload.plan`), as the simulator's do.

Failures never escape a level: they are per-request error classes, which
:func:`~tuner.metrics.summarize` counts per level; a level whose server only fails
stops early (:data:`FAILING_LEVEL_MIN_ERRORS`).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx
import numpy as np

from tuner import level_watch
from tuner.loadgen.client import ClientSet, Timeouts, discover_model, request_body, run_request
from tuner.loadgen.prompts import chat_prompt
from tuner.metrics import LevelMetrics, summarize
from tuner.request_records import CUT_AT_WINDOW_END, LevelRecords, RequestRecord
from tuner.workload import Workload

#: A closed-loop or Poisson level gives up once this many requests (at least, and at
#: least 2 x C) failed without a single success: the server is down, and hammering it
#: for the rest of the window would only inflate the error count.
FAILING_LEVEL_MIN_ERRORS = 16
#: Pause of a closed-loop client after a failed request (seconds), so that a failing
#: server is not hit in a tight loop.
ERROR_BACKOFF_S = 0.05

OnLevel = Callable[[LevelMetrics], "bool | Awaitable[bool | None] | None"]


class _LevelRun:
    """One level being measured: request bodies, records, and the failing-server rule."""

    def __init__(
        self,
        clients: httpx.AsyncClient | ClientSet,
        workload: Workload,
        concurrency: int,
        model: str,
        seed: int,
        timeouts: Timeouts,
    ):
        self.clients, self.workload, self.c = clients, workload, concurrency
        self.model = model
        self.rng = np.random.default_rng([seed, concurrency])
        self.plan = workload.plan(concurrency, self.rng)
        self.max_tokens = int(self.plan.max_tokens.max())
        self.timeout_s = timeouts.for_request(self.max_tokens)
        self.sent = 0
        self.errors = 0
        self.successes = 0
        self.failing = asyncio.Event()

    def body(self) -> bytes:
        """The next request of the plan (a closed loop cycles through it)."""
        plan, i = self.plan, self.sent % len(self.plan)
        self.sent += 1
        text = plan.prompts[i] if plan.prompts is not None else None
        if text is None:
            tokens = None if plan.prompt_tokens is None else int(plan.prompt_tokens[i])
            text = chat_prompt(self.rng, self.sent, tokens)
        return request_body(self.model, text, int(plan.max_tokens[i]), plan.ignore_eos)

    async def one(
        self, body: bytes | None = None, rec: RequestRecord | None = None, live: list[float] | None = None
    ) -> RequestRecord:
        body = body or self.body()
        if isinstance(self.clients, ClientSet):
            client = self.clients.acquire()
            try:
                rec = await run_request(client, body, self.timeout_s, rec, live)
            finally:
                self.clients.release(client)
        else:
            rec = await run_request(self.clients, body, self.timeout_s, rec, live)
        if rec.error is None:
            self.successes += 1
        else:
            self.errors += 1
            if not self.successes and self.errors >= max(FAILING_LEVEL_MIN_ERRORS, 2 * self.c):
                self.failing.set()
        return rec

    async def burst(self, bar: level_watch.LevelBar | None = None) -> LevelRecords:
        bodies = [self.body() for _ in range(self.c)]  # built before the clock starts
        started = time.perf_counter()
        if bar is None:
            records = await asyncio.gather(*(self.one(b) for b in bodies))
            return self._result(list(records), started, time.perf_counter())
        recs = [RequestRecord(start=started) for _ in bodies]
        lives: list[list[float]] = [[] for _ in bodies]
        tasks = [
            asyncio.create_task(self.one(b, r, live)) for b, r, live in zip(bodies, recs, lives, strict=True)
        ]
        every = max(level_watch.CHECK_MIN_S, bar.every_s)
        pending = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=every)
            now = time.perf_counter()
            if not pending or now - started < bar.judge_after_s:
                continue
            so_far = self._result(
                [
                    t.result() if t.done() else _streaming(r, live)
                    for t, r, live in zip(tasks, recs, lives, strict=True)
                ],
                started,
                now,
            )
            seen = level_watch.cut(so_far, now)
            value = level_watch.falls_short(seen, bar)
            if value is not None:
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                return replace(seen, projected_tok_s=value)
        return self._result([t.result() for t in tasks], started, time.perf_counter())

    async def closed_loop(self) -> LevelRecords:
        wl, c = self.workload, self.c
        t0 = time.perf_counter()
        win_start, win_end = t0 + wl.ramp_s, t0 + wl.ramp_s + wl.duration_s
        records: list[RequestRecord] = []

        async def client(i: int) -> None:
            await asyncio.sleep(wl.ramp_s * i / c)
            while time.perf_counter() < win_end:
                rec = RequestRecord(start=0.0)
                live: list[float] = []
                try:
                    rec = await self.one(rec=rec, live=live)
                except asyncio.CancelledError:
                    if live:  # still streaming when the window closed: its tokens so far count
                        rec.token_times = np.array(live)
                        rec.first_token = live[0]
                        rec.output_tokens = len(live)
                        rec.error = CUT_AT_WINDOW_END
                        records.append(rec)
                    raise
                if _inside(rec, win_start, win_end):
                    records.append(rec)
                if rec.error is not None:
                    await asyncio.sleep(ERROR_BACKOFF_S)

        tasks = [asyncio.create_task(client(i)) for i in range(c)]
        stopper = asyncio.create_task(self.failing.wait())
        await _wait_until(tasks, stopper, win_end)
        ended = min(time.perf_counter(), win_end)
        for t in [*tasks, stopper]:
            t.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
        return self._result(records, win_start if ended >= win_start else t0, ended, window=True)

    async def open_loop(self) -> LevelRecords:
        """The plan's requests at their arrival offsets (Poisson draws, or a trace's own
        timestamps); the wall runs to the last finish."""
        assert self.plan.arrivals is not None
        t0 = time.perf_counter()
        tasks: list[asyncio.Task[RequestRecord]] = []
        for offset in self.plan.arrivals.tolist():
            if self.failing.is_set():
                break
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.one()))
        records = list(await asyncio.gather(*tasks))
        ends = [r.end for r in records if r.end is not None]
        return self._result(records, t0, max(ends) if ends else time.perf_counter())

    def _result(
        self, records: list[RequestRecord], started: float, ended: float, *, window: bool = False
    ) -> LevelRecords:
        return LevelRecords(
            concurrency=self.c,
            records=records,
            started=started,
            ended=ended,
            max_tokens=self.max_tokens,
            window=window,
        )


def _streaming(rec: RequestRecord, live: list[float]) -> RequestRecord:
    """A request still in flight, as far as it has streamed (``live``: its chunk times)."""
    times = np.array(live)
    return RequestRecord(
        start=rec.start,
        first_token=float(times[0]) if len(times) else None,
        output_tokens=len(times),
        prompt_tokens=rec.prompt_tokens,
        token_times=times,
    )


def _inside(rec: RequestRecord, start: float, end: float) -> bool:
    """Whether a closed-loop request streamed a token (or, failing, ended) inside the window."""
    times = rec.token_times
    if times is not None and len(times):
        return bool(times[-1] >= start and times[0] <= end)
    return rec.end is not None and start <= rec.end <= end


async def _wait_until(tasks: Sequence[asyncio.Task], stopper: asyncio.Task, deadline: float) -> None:
    """Wait until ``deadline``, all tasks finish, or the stopper fires."""
    pending = {*tasks, stopper}
    while pending:
        left = deadline - time.perf_counter()
        if left <= 0 or stopper.done():
            return
        done, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            return
        if pending == {stopper}:
            return


async def run_level(
    client_or_url: httpx.AsyncClient | ClientSet | str,
    workload: Workload,
    concurrency: int,
    *,
    model_name: str | None = None,
    seed: int = 0,
    timeouts: Timeouts | None = None,
    fast: bool = True,
    bar: level_watch.LevelBar | None = None,
) -> LevelRecords:
    """Measure one concurrency level of ``workload``; returns its records.

    ``bar``: a burst level is watched while it runs and stopped once it cannot reach that
    bar (:mod:`tuner.level_watch`); other kinds of level are not watched.

    With a URL, connections are opened here (one per in-flight request, see
    :class:`ClientSet`) and closed at the end; with a :class:`ClientSet` or an
    ``httpx.AsyncClient`` the caller owns them (a single client's pool is the caller's
    to size, and costs more CPU at high concurrency). ``fast=False`` uses httpx's default
    transport instead of :class:`~tuner.loadgen.transport.FastTransport` (https always does).
    """
    timeouts = timeouts or Timeouts()
    if isinstance(client_or_url, str):
        async with ClientSet(client_or_url, timeouts, fast=fast) as clients:
            return await run_level(
                clients, workload, concurrency, model_name=model_name, seed=seed, timeouts=timeouts, bar=bar
            )
    if model_name is None:
        if isinstance(client_or_url, ClientSet):
            client = client_or_url.acquire()
            try:
                model_name = await discover_model(client)
            finally:
                client_or_url.release(client)
        else:
            model_name = await discover_model(client_or_url)
    level = _LevelRun(client_or_url, workload, concurrency, model_name, seed, timeouts)
    if level.plan.mode == "burst":
        return await level.burst(bar)
    if level.plan.mode == "closed-loop":
        return await level.closed_loop()
    return await level.open_loop()


async def warm_up(
    clients: ClientSet | str,
    workload: Workload,
    *,
    model_name: str | None = None,
    timeouts: Timeouts | None = None,
) -> list[RequestRecord]:
    """Send the workload's warm-up requests one after another (results are not part of any
    level; they absorb the server's slow first request)."""
    timeouts = timeouts or Timeouts()
    if isinstance(clients, str):
        async with ClientSet(clients, timeouts) as owned:
            return await warm_up(owned, workload, model_name=model_name, timeouts=timeouts)
    client = clients.acquire()
    try:
        model = model_name or await discover_model(client)
        rng = np.random.default_rng([0, 0])
        out = []
        for i in range(workload.warmup_requests):
            body = request_body(model, chat_prompt(rng, i, None), workload.warmup_max_tokens, True)
            out.append(await run_request(client, body, timeouts.for_request(workload.warmup_max_tokens)))
        return out
    finally:
        clients.release(client)


async def run_sweep(
    url: str,
    workload: Workload,
    *,
    on_level: OnLevel | None = None,
    model_name: str | None = None,
    seed: int = 0,
    timeouts: Timeouts | None = None,
    warmup: bool = True,
    fast: bool = True,
    on_records: Callable[[LevelRecords], bool | None] | None = None,
    levels: Sequence[int] | None = None,
    watch: level_watch.LevelWatch | None = None,
) -> list[LevelRecords]:
    """Warm up, then measure the workload's levels lowest first (or in the order ``levels``
    gives: a screened trial measures its proxy levels first).

    ``on_level`` receives each level's :class:`LevelMetrics` (it may be a coroutine
    function); returning ``False`` stops the sweep (this is how a study prunes).
    ``on_records`` receives the level's raw records instead (same contract).
    ``fast``: see :func:`run_level`. ``watch`` gives each level's bar as it starts
    (:mod:`tuner.level_watch`); a level stopped on it is reported like any other (its
    ``projected_tok_s`` set), and the callbacks decide whether the sweep goes on.
    """
    timeouts = timeouts or Timeouts()
    out: list[LevelRecords] = []
    async with ClientSet(url, timeouts, fast=fast) as clients:
        if model_name is None:
            client = clients.acquire()
            model_name = await discover_model(client)
            clients.release(client)
        if warmup and workload.warmup_requests:
            await warm_up(clients, workload, model_name=model_name, timeouts=timeouts)
        for i, c in enumerate(levels or workload.levels):
            bar = watch(i, c) if watch is not None else None
            level = await run_level(
                clients, workload, c, model_name=model_name, seed=seed, timeouts=timeouts, bar=bar
            )
            out.append(level)
            if on_records is not None and on_records(level) is False:
                break
            if on_level is not None:
                verdict = on_level(summarize(level))
                if inspect.isawaitable(verdict):
                    verdict = await verdict
                if verdict is False:
                    break
    return out


def measure(url: str, workload: Workload, **kwargs: Any) -> list[LevelRecords]:
    """Synchronous :func:`run_sweep` (its own event loop); same keyword arguments."""
    return asyncio.run(run_sweep(url, workload, **kwargs))
