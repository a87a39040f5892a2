"""Hung servers: a level whose tokens stop flowing is a hang, never a measurement.

A server can stop without dying (a deadlocked scheduler, an NCCL wait, a process
stopped by SIGSTOP): its port still accepts connections and its streams stay open, so
neither the exit status nor a connection error says anything. What says it is the
token progress of the level being measured: while requests are in flight, some token
must arrive every ``stall_s`` seconds. And a level must end within its deadline,
derived from the workload (:func:`level_deadline_s`).

The load generator reports progress through :func:`request_started`,
:func:`request_ended` and :func:`bytes_received`, which find the :class:`TokenClock` of
the sweep in a context variable (none outside a guarded sweep: they cost nothing then).
:func:`guard` runs a sweep and cancels it when the clock says it is hung.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

from tuner.workload import Workload

T = TypeVar("T")

#: Default seconds without a token, while requests are in flight, before a level is hung.
#: A prefill of a full batch of long prompts on the reference host takes seconds; a minute
#: of silence is no queueing delay.
DEFAULT_STALL_S = 60.0
#: Time allowed for one decode step in the default level deadline: 1 s, about 30x the
#: reference host's slowest step at its highest sweep level (~30 ms per step at C=256,
#: the calibration target of :mod:`tuner.sim.calibration`), so only a stuck level hits it.
SLOWEST_STEP_S = 1.0
#: Fixed part of the default level deadline: connection set-up, prefill of the batch.
LEVEL_BASE_S = 120.0
#: How often the guard looks at the clock, at most.
CHECK_S = 1.0


class Hang(Exception):
    """The level being measured stalled or ran past its deadline."""


def level_deadline_s(workload: Workload) -> float:
    """The default deadline of one level: every request's tokens at :data:`SLOWEST_STEP_S`
    per step (requests of a level decode together), plus the closed-loop or Poisson window."""
    window = workload.duration_s if workload.kind != "burst" else 0.0
    return LEVEL_BASE_S + window + workload.max_tokens * SLOWEST_STEP_S


class TokenClock:
    """Token progress of one sweep: requests in flight, last token, start of the busy spell."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.last = time.monotonic()
        self.busy_since = self.last

    def started(self) -> None:
        if self.in_flight == 0:
            self.last = self.busy_since = time.monotonic()
        self.in_flight += 1

    def ended(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self.last = time.monotonic()

    def progress(self) -> None:
        self.last = time.monotonic()

    def verdict(self, stall_s: float, deadline_s: float | None) -> str | None:
        """Why the sweep is hung now, or None."""
        if self.in_flight == 0:
            return None
        now = time.monotonic()
        if now - self.last > stall_s:
            return f"no token for {now - self.last:.0f} s while {self.in_flight} requests were in flight"
        if deadline_s is not None and now - self.busy_since > deadline_s:
            return f"the level ran past its deadline of {deadline_s:.0f} s"
        return None


_CLOCK: ContextVar[TokenClock | None] = ContextVar("tuner_token_clock", default=None)


def request_started() -> None:
    clock = _CLOCK.get()
    if clock is not None:
        clock.started()


def request_ended() -> None:
    clock = _CLOCK.get()
    if clock is not None:
        clock.ended()


def bytes_received() -> None:
    clock = _CLOCK.get()
    if clock is not None:
        clock.progress()


async def guard(sweep: Coroutine[Any, Any, T], *, stall_s: float, deadline_s: float | None) -> T:
    """Run ``sweep``; cancel it and raise :class:`Hang` when its tokens stop flowing for
    ``stall_s`` seconds or a level runs longer than ``deadline_s``."""
    clock = TokenClock()
    _CLOCK.set(clock)  # tasks created from here on (the sweep's requests) see this clock
    task = asyncio.ensure_future(sweep)
    step = min(CHECK_S, stall_s / 4)
    while True:
        done, _ = await asyncio.wait({task}, timeout=step)
        if done:
            return task.result()
        why = clock.verdict(stall_s, deadline_s)
        if why is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise Hang(why)
