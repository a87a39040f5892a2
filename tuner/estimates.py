"""What each configuration of a study is worth, from all its measurements.

One launch measures a configuration with run-to-run noise of a few percent (load timing,
NCCL channel placement, clocks), while the knobs that separate the best configurations
often matter by 1-2%. The highest single measurement of a study is therefore biased
upwards (the winner's curse) and is often a lucky run of a slightly worse configuration.
So a configuration is judged by the mean of its measurements, discounted by their
standard error: a configuration measured twice with a consistent result beats one lucky
run. The run-to-run noise is estimated from the study's own repeated measurements, with
:data:`NOISE_PRIOR` standing in until there are some.

Only trials that launched a server and met every constraint count; a reused trial (a copy
of another's result) adds no measurement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial, TrialState

#: Relative run-to-run standard deviation of one measured sweep, assumed until the study has
#: repeated measurements of its own: the spread of repeated launches of one configuration on
#: the reference host is about 2% at peak (calibration target of the simulator's noise).
NOISE_PRIOR = 0.02
#: Weight of the prior, in repeated-measurement pairs, when the noise is estimated.
NOISE_PRIOR_WEIGHT = 2.0
#: Standard errors subtracted from a configuration's mean to rank it: one keeps a lucky
#: single run from outranking a configuration confirmed by a second launch.
CONFIDENCE_Z = 1.0


@dataclass(frozen=True)
class Estimate:
    """A configuration's measurements: ``values`` are the objective's last value per run,
    ``numbers`` the trials that measured it (``trial`` is the first)."""

    key: str
    trial: FrozenTrial
    values: tuple[float, ...]
    numbers: tuple[int, ...]

    @property
    def runs(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    def score(self, noise: float) -> float:
        """The mean less :data:`CONFIDENCE_Z` standard errors (relative ``noise`` per run)."""
        return self.mean - self._spread(noise)

    def upper(self, noise: float) -> float:
        """The mean plus :data:`CONFIDENCE_Z` standard errors."""
        return self.mean + self._spread(noise)

    def _spread(self, noise: float) -> float:
        return CONFIDENCE_Z * self.mean * noise / math.sqrt(self.runs)


def measured(t: FrozenTrial) -> bool:
    """A feasible, completed trial that launched its own server."""
    return (
        t.state == TrialState.COMPLETE
        and bool(t.values)
        and all(math.isfinite(v) for v in t.values)
        and t.user_attrs.get("outcome", "complete") == "complete"
        and "reused_from" not in t.user_attrs
        and not t.user_attrs.get("violations")
        and not any(v > 0 for v in t.constraints.values())
    )


def estimates(trials: Iterable[FrozenTrial]) -> list[Estimate]:
    """One estimate per configuration measured in ``trials`` (by ``config_key``; the trial's
    parameters where a trial has none), first measured first."""
    groups: dict[str, list[FrozenTrial]] = {}
    for t in sorted(trials, key=lambda t: t.number):
        if measured(t):
            key = t.user_attrs.get("config_key") or repr(sorted(t.params.items()))
            groups.setdefault(key, []).append(t)
    return [
        Estimate(k, ts[0], tuple(t.values[-1] for t in ts), tuple(t.number for t in ts))
        for k, ts in groups.items()
    ]


def noise(ests: Iterable[Estimate]) -> float:
    """Relative run-to-run standard deviation: pooled over configurations measured more than
    once, shrunk towards :data:`NOISE_PRIOR`."""
    ss, dof = NOISE_PRIOR**2 * NOISE_PRIOR_WEIGHT, NOISE_PRIOR_WEIGHT
    for e in ests:
        if e.runs > 1 and e.mean > 0:
            m = e.mean
            ss += sum((v / m - 1.0) ** 2 for v in e.values)
            dof += e.runs - 1
    return math.sqrt(ss / dof)


def leader(ests: Sequence[Estimate], sigma: float) -> Estimate:
    """The estimate with the best score (mean less its standard error); on ties the first
    measured."""
    return max(ests, key=lambda e: (e.score(sigma), -e.trial.number))


def best(trials: Iterable[FrozenTrial]) -> Estimate | None:
    """The best configuration measured in ``trials`` (see :func:`leader`)."""
    ests = estimates(trials)
    return leader(ests, noise(ests)) if ests else None
