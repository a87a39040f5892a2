"""The load a sweep applies: which concurrency levels, how requests arrive, how long they are.

One :class:`Workload` drives the simulator, the emulator and the HTTP load generator alike,
so a simulated sweep and a measured one are the same experiment. :meth:`Workload.plan`
is the one place that turns a workload into the requests of a level (their prompt and
reply lengths, their arrivals); every backend sends what it says.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.trace import Trace, load_trace

WorkloadKind = Literal["burst", "closed-loop", "poisson", "trace"]
#: Requests a closed-loop level's plan holds: clients cycle through them. Enough that no
#: two requests in flight share a prompt at the largest levels used here.
CLOSED_LOOP_PLAN_REQUESTS = 4096


class LengthDistribution(BaseModel):
    """Token lengths drawn per request.

    * ``fixed``: always ``value``;
    * ``uniform``: integers in [``low``, ``high``];
    * ``lognormal``: ``median`` and log-space ``sigma`` (the usual shape of chat replies);
    * ``histogram``: ``bins`` of ``[tokens, weight]``, each request takes one bin's tokens.

    ``low``/``high`` also clip the other kinds.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["fixed", "uniform", "lognormal", "histogram"]
    value: int | None = Field(None, ge=1)
    low: int = Field(1, ge=1)
    high: int | None = Field(None, ge=1)
    median: float | None = Field(None, gt=0)
    sigma: float = Field(0.5, ge=0)
    bins: tuple[tuple[int, float], ...] = ()

    @model_validator(mode="after")
    def _complete(self) -> LengthDistribution:
        if self.kind == "fixed" and self.value is None:
            raise ValueError("a fixed length needs value")
        if self.kind == "uniform" and self.high is None:
            raise ValueError("a uniform length needs high (and low)")
        if self.kind == "lognormal" and self.median is None:
            raise ValueError("a lognormal length needs median (and sigma)")
        if self.kind == "histogram":
            if not self.bins:
                raise ValueError("a histogram needs bins: [[tokens, weight], ...]")
            if any(t < 1 or w < 0 for t, w in self.bins) or sum(w for _, w in self.bins) <= 0:
                raise ValueError("histogram bins need tokens >= 1 and weights >= 0 with a positive sum")
        if self.high is not None and self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            out = np.full(n, float(self.value or 1))
        elif self.kind == "uniform":
            out = rng.integers(self.low, (self.high or self.low) + 1, n).astype(float)
        elif self.kind == "lognormal":
            out = rng.lognormal(np.log(self.median or 1.0), self.sigma, n)
        else:
            tokens = np.array([t for t, _ in self.bins], dtype=float)
            weights = np.array([w for _, w in self.bins], dtype=float)
            out = tokens[rng.choice(len(tokens), size=n, p=weights / weights.sum())]
        return np.clip(np.rint(out), self.low, self.high or np.inf).astype(np.int64)

    @cached_property
    def longest(self) -> int:
        """The longest length a request may draw: ``high`` where set, else the longest of
        4096 draws (seed 0), which is exact for every kind but the log-normal. Computed once
        per distribution: the workload asks it for every level."""
        return int(self.high or self.sample(np.random.default_rng(0), 4096).max())

    def mean(self) -> float:
        """Expected length (by sampling for the clipped log-normal; exact otherwise)."""
        return self._mean

    @cached_property
    def _mean(self) -> float:
        if self.kind == "fixed":
            return float(self.value or 1)
        if self.kind == "uniform":
            return (self.low + (self.high or self.low)) / 2
        if self.kind == "histogram":
            tokens = np.array([t for t, _ in self.bins], dtype=float)
            weights = np.array([w for _, w in self.bins], dtype=float)
            return float(np.clip(tokens, self.low, self.high or np.inf) @ weights / weights.sum())
        return float(self.sample(np.random.default_rng(0), 20_000).mean())


class Lengths(BaseModel):
    """Prompt and reply length distributions (instead of fixed prompts and ``max_tokens``)."""

    model_config = ConfigDict(extra="forbid")

    prompt: LengthDistribution | None = None
    output: LengthDistribution | None = None


@dataclass(frozen=True)
class LevelPlan:
    """The requests of one level, as every backend sends them.

    ``prompt_tokens``/``max_tokens`` hold one entry per request (closed loop: the sequence
    the clients cycle through). ``prompt_tokens`` of None means the short chat prompt of
    the load generator. ``output_tokens`` holds each reply's exact length where the workload
    fixes it (a trace, an output distribution, ``ignore_eos``); None leaves it to the
    server (a real model stops at EOS, the simulator draws a natural chat reply).
    ``arrivals`` are offsets from the level's start for open-loop kinds, None otherwise.
    """

    concurrency: int
    mode: Literal["burst", "closed-loop", "open"]
    max_tokens: np.ndarray
    prompt_tokens: np.ndarray | None
    output_tokens: np.ndarray | None
    arrivals: np.ndarray | None
    prompts: tuple[str | None, ...] | None = None

    @property
    def ignore_eos(self) -> bool:
        return self.output_tokens is not None

    def __len__(self) -> int:
        return len(self.max_tokens)


#: The reference campaign's sweep: C=1 at 512 max tokens, then 32..256 at 2048.
REFERENCE_LEVELS = (1, 32, 64, 128, 192, 256)


class Workload(BaseModel):
    """A concurrency sweep, or the replay of a trace.

    * ``burst``: at each level C, send C requests at once and wait for all of them
      (the reference campaign's method; aggregate tok/s = tokens / wall).
    * ``closed-loop``: keep C requests in flight for ``duration_s`` after a ``ramp_s``
      ramp; every token streamed inside the window counts, whether or not its request
      finishes inside it.
    * ``poisson``: open loop, requests arrive at ``rate`` per second for ``duration_s``;
      the level's "concurrency" is the rate label.
    * ``trace``: the requests of a JSONL file (:mod:`tuner.trace`). ``trace_mode: open``
      replays them at their timestamps (times ``time_scale``; level L replays L times
      faster); ``closed`` keeps C of them in flight, in file order, like ``closed-loop``.

    ``lengths`` replaces the fixed prompt and ``max_tokens`` with distributions (an output
    distribution fixes every reply's length, as a trace does).
    """

    model_config = ConfigDict(extra="forbid")

    kind: WorkloadKind = "burst"
    levels: tuple[int, ...] = REFERENCE_LEVELS
    max_tokens: int = Field(2048, ge=1)
    #: max_tokens of the C=1 level (the single-stream measurement).
    single_max_tokens: int = Field(512, ge=1)
    #: prompt length in tokens; None means short chat prompts.
    prompt_tokens: int | None = Field(None, ge=1)
    ignore_eos: bool = False
    duration_s: float = Field(60.0, gt=0)
    ramp_s: float = Field(5.0, ge=0)
    #: poisson: requests per second per unit of level (level 32 = 32 * rate req/s).
    rate: float = Field(0.05, gt=0)
    warmup_requests: int = Field(1, ge=0)
    warmup_max_tokens: int = Field(16, ge=1)
    #: kind trace: the JSONL file (relative paths are relative to the space file).
    trace: str | None = None
    trace_mode: Literal["open", "closed"] = "closed"
    #: kind trace, open: multiplies the trace's arrival offsets (0.5 = twice the rate).
    time_scale: float = Field(1.0, gt=0)
    lengths: Lengths | None = None

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v:
            raise ValueError("at least one concurrency level is needed")
        if any(c < 1 for c in v):
            raise ValueError("concurrency levels must be >= 1")
        return tuple(sorted(set(v)))

    @model_validator(mode="after")
    def _trace_fields(self) -> Workload:
        if self.kind == "trace" and not self.trace:
            raise ValueError("kind trace needs trace: the path of a JSONL file of requests")
        if self.kind != "trace" and self.trace:
            raise ValueError(f"trace is only read by kind trace (kind is {self.kind})")
        return self

    # --- derived ------------------------------------------------------------------------
    def resolved(self, base: Path) -> Workload:
        """This workload with a relative trace path made absolute against ``base`` (the
        space file's folder); the trace is loaded once here so a bad file fails at load."""
        if not self.trace:
            return self
        path = Path(self.trace)
        if not path.is_absolute():
            path = (base / path).resolve()
        load_trace(path)
        return self.model_copy(update={"trace": str(path)})

    def load_trace(self) -> Trace:
        if not self.trace:
            raise ValueError("this workload replays no trace")
        return load_trace(self.trace)

    def max_tokens_for(self, concurrency: int) -> int:
        """The request's ``max_tokens`` at a level (the largest one, for varying lengths)."""
        if self.kind == "trace":
            return int(self.load_trace().output_tokens.max())
        if self.lengths is not None and self.lengths.output is not None:
            return self.lengths.output.longest
        return self.single_max_tokens if concurrency == 1 else self.max_tokens

    def mean_lengths(self, concurrency: int) -> tuple[float, float]:
        """Expected (prompt, output) tokens of a request at a level (output: as sent; the
        natural length of a chat reply is the server's business and is not counted)."""
        if self.kind == "trace":
            trace = self.load_trace()
            return float(trace.prompt_tokens.mean()), float(trace.output_tokens.mean())
        prompt = float(self.prompt_tokens or SHORT_PROMPT_TOKENS)
        output = float(self.max_tokens_for(concurrency))
        if self.lengths is not None:
            if self.lengths.prompt is not None:
                prompt = self.lengths.prompt.mean()
            if self.lengths.output is not None:
                output = self.lengths.output.mean()
        return prompt, output

    def plan(self, concurrency: int, rng: np.random.Generator) -> LevelPlan:
        """The requests of one level (see :class:`LevelPlan`)."""
        if self.kind == "trace":
            return self._trace_plan(concurrency)
        if self.kind == "burst":
            n, mode, arrivals = concurrency, "burst", None
        elif self.kind == "closed-loop":
            n, mode, arrivals = CLOSED_LOOP_PLAN_REQUESTS, "closed-loop", None
        else:
            rate = self.rate * concurrency
            n = max(1, int(rate * self.duration_s))
            mode, arrivals = "open", np.cumsum(rng.exponential(1.0 / rate, n))
        prompt = None if self.prompt_tokens is None else np.full(n, self.prompt_tokens, dtype=np.int64)
        max_tokens = np.full(n, self.max_tokens_for(concurrency), dtype=np.int64)
        output = max_tokens.copy() if self.ignore_eos else None
        if self.lengths is not None:
            if self.lengths.prompt is not None:
                prompt = self.lengths.prompt.sample(rng, n)
            if self.lengths.output is not None:
                output = max_tokens = self.lengths.output.sample(rng, n)
        return LevelPlan(concurrency, mode, max_tokens, prompt, output, arrivals)  # type: ignore[arg-type]

    def _trace_plan(self, concurrency: int) -> LevelPlan:
        trace = self.load_trace()
        prompts = tuple(r.prompt for r in trace.requests)
        out = trace.output_tokens
        if self.trace_mode == "open":
            if not trace.timed:
                raise ValueError(f"{trace.path}: open-loop replay needs arrival_s on every request")
            arrivals = trace.arrivals * self.time_scale / concurrency
            return LevelPlan(concurrency, "open", out, trace.prompt_tokens, out, arrivals, prompts)
        return LevelPlan(concurrency, "closed-loop", out, trace.prompt_tokens, out, None, prompts)


#: Prompt length of the load generator's short chat prompt (a one-line question wrapped in
#: the chat template), in tokens: what "short chat prompts" means wherever a length is needed.
SHORT_PROMPT_TOKENS = 64


def parse_levels(text: str) -> tuple[int, ...]:
    """Parse ``"1,32,64"`` into a tuple of levels (raises ValueError with the bad item)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"bad concurrency level {item!r} (positive integers, comma-separated)")
        out.append(int(item))
    if not out:
        raise ValueError("no concurrency levels given")
    return tuple(out)
