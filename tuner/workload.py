"""The load a sweep applies: which concurrency levels, how requests arrive, how long they are.

One :class:`Workload` drives the simulator and the HTTP load generator alike, so a
simulated sweep and a measured one are the same experiment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

WorkloadKind = Literal["burst", "closed-loop", "poisson"]

#: The reference campaign's sweep: C=1 at 512 max tokens, then 32..256 at 2048.
REFERENCE_LEVELS = (1, 32, 64, 128, 192, 256)
#: Characters per token of English text (tokenizer rule of thumb): the load generator
#: sizes ``prompt_tokens`` prompts with it, the emulator estimates prompt lengths with it.
CHARS_PER_TOKEN = 4


class Workload(BaseModel):
    """A concurrency sweep.

    * ``burst``: at each level C, send C requests at once and wait for all of them
      (the reference campaign's method; aggregate tok/s = tokens / wall).
    * ``closed-loop``: keep C requests in flight for ``duration_s`` after a ``ramp_s``
      ramp; tokens of requests finishing inside the window count.
    * ``poisson``: open loop, requests arrive at ``rate`` per second for ``duration_s``;
      the level's "concurrency" is the rate label.
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

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v:
            raise ValueError("at least one concurrency level is needed")
        if any(c < 1 for c in v):
            raise ValueError("concurrency levels must be >= 1")
        return tuple(sorted(set(v)))

    def max_tokens_for(self, concurrency: int) -> int:
        return self.single_max_tokens if concurrency == 1 else self.max_tokens


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
