"""What each configuration of a study is worth, from all its measurements.

One launch measures a configuration with run-to-run noise of a few percent (load timing,
NCCL channel placement, clocks), while the knobs that separate the best configurations
often matter by 1-2%. The highest single measurement of a study is therefore biased
upwards (the winner's curse) and is often a lucky run of a slightly worse configuration.
So a configuration is judged by its estimated value, discounted by its standard error: a
configuration measured twice with a consistent result beats one lucky run. The estimate
pools the configuration's own launches with what its parameter values measured in the
rest of the study (the additive model of :mod:`tuner.effects`), so a lucky run of a
configuration whose settings did poorly elsewhere is discounted further. The run-to-run
noise is estimated from the study's own repeated measurements, with :data:`NOISE_PRIOR`
standing in until there are some.

Only trials that launched a server and met every constraint count; a reused trial (a copy
of another's result) adds no measurement.

A study that screens on a proxy (:mod:`tuner.fidelity`) recommends only configurations
measured on the target workload when it has any: a proxy value is a lower bound of the
target value (it misses the levels the proxy leaves out), and what the deployment serves is
the target. The proxy's launches still count towards a configuration's estimate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner import effects, trial_record
from tuner.trial_record import TrialRecord

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
    #: Of ``numbers``, the launches measured on the target workload.
    target_numbers: tuple[int, ...] = ()
    #: Mean and standard deviation of log(objective) pooled with the other configurations'
    #: launches (see :mod:`tuner.effects`); None ranks by the own launches alone.
    pooled: tuple[float, float] | None = None

    @property
    def runs(self) -> int:
        return len(self.values)

    @property
    def confirmed(self) -> bool:
        """Measured on the target workload at least once."""
        return bool(self.target_numbers)

    @property
    def mean(self) -> float:
        """The mean of the configuration's own launches."""
        return sum(self.values) / len(self.values)

    @property
    def value(self) -> float:
        """The configuration's estimated objective: its launches pooled with the study's
        (the additive model's posterior mean), or their mean where there is no model."""
        return math.exp(self.pooled[0]) if self.pooled is not None else self.mean

    def score(self, noise: float) -> float:
        """The value less :data:`CONFIDENCE_Z` standard errors (relative ``noise`` per run)."""
        return self._bound(noise, -CONFIDENCE_Z)

    def upper(self, noise: float) -> float:
        """The value plus :data:`CONFIDENCE_Z` standard errors."""
        return self._bound(noise, CONFIDENCE_Z)

    def _bound(self, noise: float, z: float) -> float:
        if self.pooled is not None:
            mean, sd = self.pooled
            return math.exp(mean + z * sd)
        return self.mean * (1.0 + z * noise / math.sqrt(self.runs))


def launched(t: FrozenTrial) -> bool:
    """A completed trial that launched its own server and measured the objective, whether
    or not it met the objective's constraints."""
    return (
        t.state == TrialState.COMPLETE
        and bool(t.values)
        and all(math.isfinite(v) for v in t.values)
        and trial_record.outcome(t) == "complete"
        and trial_record.reused_from(t) is None
    )


def measured(t: FrozenTrial) -> bool:
    """A feasible, completed trial that launched its own server."""
    return launched(t) and not trial_record.violations(t) and not any(v > 0 for v in t.constraints.values())


def feasible_on_average(launches: Sequence[FrozenTrial]) -> bool:
    """Whether a configuration meets the objective's constraints over all its launches: the
    mean of each constraint value is <= 0. A configuration at the edge of a floor (a
    single-stream rate that meets 60 tok/s in one launch of six) is judged by all six."""
    values = [{**trial_record.violations(t), **t.constraints} for t in launches]
    for name in {name for v in values for name in v}:
        if sum(v.get(name, 0.0) for v in values) / len(values) > 0:
            return False
    return True


def observed(t: FrozenTrial) -> float | None:
    """What a trial measured of the objective: the value of a :func:`measured` trial, the
    partial value of a pruned one (a lower bound, and such a trial is far below the best
    anyway), None for the rest."""
    if measured(t):
        return t.values[-1]
    if t.state == TrialState.PRUNED:
        return trial_record.partial_value(t)
    return None


@dataclass(frozen=True)
class Evidence:
    """What a study's trials say: one estimate per measured configuration, the run-to-run
    noise, and the additive model they were pooled with (None when nothing was measured)."""

    estimates: list[Estimate]
    noise: float
    model: effects.Effects | None

    def leader(self) -> Estimate | None:
        """The best configuration (see :func:`leader`), whatever it was measured on."""
        return leader(self.estimates, self.noise) if self.estimates else None

    def recommended(self) -> Estimate | None:
        """The configuration to recommend: the best of those measured on the target workload,
        or the best of all while none is."""
        confirmed = [e for e in self.estimates if e.confirmed]
        return leader(confirmed, self.noise) if confirmed else self.leader()


def evidence(trials: Iterable[FrozenTrial]) -> Evidence:
    """Estimates of every configuration measured in ``trials`` (by ``config_key``; the
    trial's parameters where a trial has none), first measured first, pooled by one fit of
    the additive model."""
    trials = sorted(trials, key=lambda t: t.number)
    groups: dict[str, list[FrozenTrial]] = {}
    for t in trials:
        if launched(t):
            groups.setdefault(_key(t), []).append(t)
    groups = {k: ts for k, ts in groups.items() if feasible_on_average(ts)}
    ests = [
        Estimate(
            k,
            ts[0],
            tuple(t.values[-1] for t in ts),
            tuple(t.number for t in ts),
            tuple(t.number for t in ts if trial_record.fidelity(t) == "target"),
        )
        for k, ts in groups.items()
    ]
    sigma = noise(ests)
    if not ests:
        return Evidence(ests, sigma, None)
    fitted = model(trials, sigma)
    # A configuration that measured nothing (all requests failed) keeps its own mean of 0.
    pooled = [
        replace(e, pooled=fitted.predict(e.trial.params, e.key)) if min(e.values) > 0 else e for e in ests
    ]
    return Evidence(pooled, sigma, fitted)


def estimates(trials: Iterable[FrozenTrial]) -> list[Estimate]:
    """One estimate per configuration measured in ``trials`` (see :func:`evidence`)."""
    return evidence(trials).estimates


def model(trials: Iterable[FrozenTrial], sigma: float) -> effects.Effects:
    """The additive model of :mod:`tuner.effects` fitted to what ``trials`` measured."""
    return effects.fit(observations(trials), sigma)


def observations(trials: Iterable[FrozenTrial]) -> list[effects.Observation]:
    """What ``trials`` measured of the objective, one observation per launch (see
    :func:`observed`)."""
    out = []
    for t in trials:
        value = observed(t)
        if value is not None and value > 0:
            out.append(effects.Observation(t.params, _key(t), value))
    return out


def _key(t: FrozenTrial) -> str:
    return trial_record.config_key(t) or repr(sorted(t.params.items()))


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
    """The configuration to recommend from ``trials`` (see :meth:`Evidence.recommended`)."""
    return evidence(trials).recommended()


def record(found: Estimate, trials: Sequence[FrozenTrial]) -> TrialRecord:
    """The readable record of a configuration: its first launch on the target workload (the
    one whose levels are the whole target), with ``runs``, ``target_runs``, ``mean`` and
    ``estimate`` saying what it rests on. ``trials``: the study's, by number."""
    first = min(found.target_numbers) if found.target_numbers else found.trial.number
    trial = next((t for t in trials if t.number == first), found.trial)
    return replace(
        TrialRecord.of(trial),
        runs=found.numbers,
        target_runs=found.target_numbers,
        mean=found.mean,
        estimate=found.value,
    )


def best_record(study: optuna.Study) -> TrialRecord | None:
    """The first trial of the recommended configuration (pareto: by peak), judged by all its
    launches (:func:`best`); ``runs``, ``target_runs`` and ``mean`` say what it rests on."""
    trials = study.get_trials(deepcopy=False)
    found = best(trials)
    return None if found is None else record(found, trials)
