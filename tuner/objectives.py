"""What a trial is scored by, computed from its per-level metrics.

* ``peak`` (default): the best aggregate output tok/s over the sweep's levels above C=1.
* ``single``: the C=1 (single-stream) tok/s.
* ``goodput``: the best, over levels, of tok/s counting only requests that met the TTFT
  and TPOT limits.
* ``pareto``: single and peak together (two objectives; Optuna cannot prune these).

Constraints (``min_single_stream``) make a configuration infeasible when violated; they
are told to the sampler through ``trial.set_constraint`` (feasible when <= 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tuner.metrics import LevelMetrics
from tuner.request_records import LevelRecords

ObjectiveName = Literal["peak", "single", "goodput", "pareto"]

#: Decimals an objective value is stored with: 0.1 tok/s, as every output of tuner prints it
#: and far below the run-to-run noise (about 2%, :mod:`tuner.estimates`); optuna-dashboard
#: prints the stored float as it is (``2241.441708862716`` on its best-value card otherwise).
#: Below :data:`FINE_BELOW` tok/s (a small model on a CPU) one more, so the resolution stays
#: under 1% of the value.
VALUE_DECIMALS = 1
FINE_BELOW = 10.0


def stored(value: float) -> float:
    """``value`` (tok/s) at the precision it is stored and told to Optuna with."""
    return round(value, VALUE_DECIMALS + (1 if abs(value) < FINE_BELOW else 0))


class Objective(BaseModel):
    """The objective section of a search space (and ``tuner search --objective``)."""

    model_config = ConfigDict(extra="forbid")

    name: ObjectiveName = "peak"
    #: single-stream floor in tok/s; below it a configuration is infeasible.
    min_single_stream: float | None = Field(None, ge=0)
    #: goodput limits: a request counts if its TTFT and TPOT are within these.
    ttft_s: float = Field(2.0, gt=0)
    tpot_ms: float = Field(100.0, gt=0)

    @property
    def directions(self) -> list[Literal["minimize", "maximize"]]:
        return ["maximize", "maximize"] if self.name == "pareto" else ["maximize"]

    @property
    def multi(self) -> bool:
        return self.name == "pareto"

    def level_value(self, m: LevelMetrics, goodput: float | None) -> float:
        """The per-level intermediate value reported to Optuna (for pruning), as stored."""
        if self.name == "goodput" and goodput is not None:
            return stored(goodput)
        return stored(m.output_tok_s)

    def value(
        self, levels: Sequence[LevelMetrics], goodputs: Sequence[float | None] = ()
    ) -> float | tuple[float, float]:
        """The objective's value (two for ``pareto``), as stored (:func:`stored`)."""
        single = stored(single_stream(levels))
        peak = stored(peak_tok_s(levels))
        if self.name == "single":
            return single
        if self.name == "pareto":
            return (single, peak)
        if self.name == "goodput":
            vals = [g for g in goodputs if g is not None]
            return stored(max(vals)) if vals else 0.0
        return peak

    def partial(self, levels: Sequence[LevelMetrics], goodputs: Sequence[float | None] = ()) -> float | None:
        """The objective over the levels a pruned sweep measured: a lower bound of the full
        sweep's value, or None when those levels do not measure it yet (the peak after C=1
        alone, or a two-objective study)."""
        if self.multi:
            return None
        if self.name == "single":
            return stored(single_stream(levels)) if any(m.concurrency == 1 for m in levels) else None
        if not any(m.concurrency > 1 for m in levels):
            return None
        return float(self.value(levels, goodputs))  # type: ignore[arg-type]

    def feasibility(self, constraints: Mapping[str, float]) -> float | None:
        """How close a measured configuration is to meeting the objective's constraints, as
        the worst ratio of what it measured to what a constraint asks (>= 1: met); None
        when the objective has none or ``constraints`` does not say. A study that has no
        feasible configuration yet walks towards the highest ratio (tuner.sampler)."""
        ratios = []
        if self.min_single_stream and "min_single_stream" in constraints:
            ratios.append(1.0 - constraints["min_single_stream"] / self.min_single_stream)
        return min(ratios) if ratios else None

    def violations(self, levels: Sequence[LevelMetrics]) -> dict[str, float]:
        """Constraint values (> 0 = violated) for ``trial.set_constraint``."""
        out: dict[str, float] = {}
        if self.min_single_stream is not None:
            out["min_single_stream"] = self.min_single_stream - single_stream(levels)
        return out


def single_stream(levels: Sequence[LevelMetrics]) -> float:
    for m in levels:
        if m.concurrency == 1:
            return m.output_tok_s
    return 0.0


def peak_tok_s(levels: Sequence[LevelMetrics]) -> float:
    """Best aggregate tok/s over levels above C=1 (C=1 itself when it is the only level)."""
    multi = [m.output_tok_s for m in levels if m.concurrency > 1]
    if multi:
        return max(multi)
    return max((m.output_tok_s for m in levels), default=0.0)


def goodput_tok_s(level: LevelRecords, ttft_s: float, tpot_ms: float) -> float:
    """Output tok/s of the level's requests that met both latency limits."""
    wall = max(level.ended - level.started, 1e-9)
    good = 0
    for r in level.records:
        if not r.ok or r.first_token is None:
            continue
        ttft = r.first_token - r.start
        tpot = (r.end - r.first_token) / (r.output_tokens - 1) * 1e3 if r.output_tokens > 1 else 0.0  # type: ignore[operator]
        if ttft <= ttft_s and tpot <= tpot_ms:
            good += r.output_tokens
    return float(np.float64(good) / wall)
