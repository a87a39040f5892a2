"""SGLang's scheduling decisions, shared by the simulator and the emulator.

Both front ends play SGLang's scheduler loop: :mod:`tuner.sim.serving` jumps from event
to event over numpy arrays, :mod:`tuner.sim.realtime` paces one iteration at a time in
real time. What they decide at each iteration boundary is SGLang's policy and lives here
once, in :class:`SglangScheduler` (after the replica-scheduler classes of Vidur, which
keep the policy apart from the simulation loop):

* admission: waiting requests join the running batch, in queue order, while the
  running-request cap and the KV pool allow, each reserving its prompt plus
  ``new_token_ratio`` of its remaining ``max_tokens`` (the ratio decays with every decode
  step and is reset by a retraction);
* decode budget: how many decode steps fit in the free KV pool, and when none does,
* retraction: the requests with the fewest output tokens are re-queued;
* step jitter: the per-launch factor and per-step noise on the modelled step times.

The loops keep their own data (arrays or request objects) and hand the policy what it
needs; the arithmetic, and the order of the random draws, is the policy's.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tuner.sim.model import PerfModel

#: SGLang's scheduler constants (SGLANG_INIT_NEW_TOKEN_RATIO, the 0.14 min factor, and
#: SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS).
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
#: SGLang clips the max_new_tokens used in that estimate (CLIP_MAX_NEW_TOKENS_ESTIMATION).
CLIP_MAX_NEW_TOKENS = 4096
#: Smallest factor the per-step noise may scale a step by (a step never takes less than
#: half its modelled time).
MIN_STEP_FACTOR = 0.5


class SglangScheduler:
    """The decisions of SGLang's scheduler for one launched server.

    Holds the launch's limits (KV pool, running-request cap, prefill chunk, decode steps
    per iteration), the current ``new_token_ratio``, and the random stream of the step
    noise; the per-launch factor is drawn from it on construction, unless ``launch_factor``
    sets it (a what-if: how a workload's figures answer a server 2% slower).
    """

    def __init__(
        self, model: PerfModel, *, rng: np.random.Generator, noise: float, launch_factor: float | None = None
    ):
        mem = model.memory
        self.kv_tokens = int(mem.kv_tokens)
        self.max_running_requests = int(mem.max_running_requests)
        self.chunked_prefill_size = int(mem.chunked_prefill_size)
        self.steps_per_iteration = max(1, int(model.args.num_continuous_decode_steps))
        self.noise = noise
        self.rng = rng
        #: One slow or fast launch: every step of this server is scaled by it.
        # Drawn even when set, so the step noise that follows is the same stream either way.
        drawn = float(rng.lognormal(0.0, noise)) if noise > 0 else 1.0
        self.launch_factor = drawn if launch_factor is None else launch_factor
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO

    # --- admission ------------------------------------------------------------------------
    def has_room(self, running: int) -> bool:
        """Whether a batch of ``running`` requests is below the running-request cap."""
        return running < self.max_running_requests

    def admit(self, kv_used: int, running_left: np.ndarray, waiting: Iterable[tuple[int, int]]) -> int:
        """How many requests from the head of the queue join the running batch.

        ``kv_used`` is the KV the running batch holds, ``running_left`` each running
        request's ``max_tokens`` minus its output so far; ``waiting`` yields, in queue
        order, each waiting request's KV need (prompt plus output so far) and its tokens
        left. Iterated lazily: it stops at the first request that does not fit. A request
        is admitted into an empty batch whatever its reservation (SGLang does too).
        """
        running = len(running_left)
        if not self.has_room(running):
            return 0
        room = self.max_running_requests - running
        ratio = self.new_token_ratio
        reserved = float(kv_used + (np.minimum(running_left, CLIP_MAX_NEW_TOKENS) * ratio).sum())
        n = 0
        for need, left in waiting:
            if n >= room:
                break
            est = need + min(left, CLIP_MAX_NEW_TOKENS) * ratio
            if reserved + est > self.kv_tokens and (running or n):
                break
            n += 1
            reserved += est
        return n

    def decayed(self, steps: int) -> None:
        """``steps`` decode steps ran: the reservation ratio decays toward its floor."""
        self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY * steps)

    def reset_ratio(self) -> None:
        """Back to the initial reservation ratio (a fresh start, or after a retraction)."""
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO

    # --- decode budget and retraction -----------------------------------------------------
    def decode_steps(self, batch: int, kv_used: int, wanted: int) -> int:
        """Decode steps of a batch of ``batch`` requests that fit in the free KV pool, at
        most ``wanted``; 0 means none does and the batch must be retracted."""
        free = self.kv_tokens - kv_used
        if free < batch * wanted:
            return free // batch if free >= batch else 0
        return wanted

    def retract(self, generated: np.ndarray, kv: np.ndarray, kv_used: int) -> list[int]:
        """Positions (in the running batch) of the requests to re-queue, in retraction order.

        SGLang retracts the requests with the fewest output tokens first (``generated``;
        ties in batch order) until one iteration of the rest fits in the pool, keeping at
        least one; each frees its ``kv``. The reservation ratio starts over.
        """
        out: list[int] = []
        b = len(generated)
        need = self.steps_per_iteration
        for i in np.argsort(generated, kind="stable"):
            if kv_used + b * need <= self.kv_tokens or b <= 1:
                break
            out.append(int(i))
            kv_used -= int(kv[i])
            b -= 1
        self.reset_ratio()
        return out

    # --- step jitter ----------------------------------------------------------------------
    def step_s(self, model_s: float) -> float:
        """Duration of one step the model says takes ``model_s``: launch factor and noise."""
        return model_s * self.jitter() * self.launch_factor

    def steps_s(self, model_s: np.ndarray) -> np.ndarray:
        """:meth:`step_s` of a run of steps at once (one noise draw per step)."""
        dt = np.asarray(model_s, dtype=float) * self.launch_factor
        if self.noise > 0:
            dt = dt * np.clip(1.0 + self.noise * self.rng.standard_normal(len(dt)), MIN_STEP_FACTOR, None)
        return dt

    def jitter(self) -> float:
        """One step's noise factor (1 without noise)."""
        if self.noise > 0:
            return max(MIN_STEP_FACTOR, 1.0 + self.noise * float(self.rng.standard_normal()))
        return 1.0
