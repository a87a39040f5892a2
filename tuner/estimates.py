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

A launch can also be wrong without failing: a server that glitched (a stalled clock, a
cache answering, a level cut short) measures a value the configuration does not have. So
a launch that would change the recommendation and lies more than :data:`OUTLIER_Z`
standard deviations from what the rest of the study expects of it (:func:`outlier`) is
flagged and measured again before anything else. Until then its configuration is
recommended over no unflagged one; once re-measured, the flagged launch counts when the
re-measurement agrees with it and is dropped as a glitch when it does not
(:func:`outlier_verdicts`).

A study that screens on a proxy (:mod:`tuner.fidelity`) recommends only configurations
measured on the target workload when it has any: a proxy value is a lower bound of the
target value (it misses the levels the proxy leaves out), and what the deployment serves is
the target. The proxy's launches still count towards a configuration's estimate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner import effects, trial_record
from tuner.trial_record import TrialRecord

#: Relative run-to-run standard deviation of one measured sweep, assumed until the study has
#: repeated measurements of its own: the spread of repeated launches of one configuration on
#: the reference host is about 2% at peak (calibration target of the simulator's noise; its
#: best configuration spreads 1.8% on the proxy and 2.2% on the target over 30 launches).
#: Other hosts and workloads spread more: 3.2-4.4% on the suite's trace, long-prompt,
#: goodput and single-stream spaces (benchmarks/noise_spread.py), which a study learns
#: from its own repeats.
NOISE_PRIOR = 0.02
#: Weight of the prior, in repeated-measurement pairs, when the noise is estimated.
NOISE_PRIOR_WEIGHT = 2.0
#: Standard errors subtracted from a configuration's mean to rank it: one keeps a lucky
#: single run from outranking a configuration confirmed by a second launch.
CONFIDENCE_Z = 1.0
#: Standard errors of its launches by which a configuration's single-stream mean must clear
#: the objective's floor (``min_single_stream``) to be recommended over one that clears it
#: by less: two, what one launch cannot tell apart. A floor is a requirement of the
#: deployment; a configuration 0.2% under it on the host measures above it in one launch of
#: two, and a study's leader is the one whose launches were lucky (the winner's curse).
FLOOR_SE = 2.0
#: Standard deviations (of log(objective): the prediction's and one launch's noise) by which
#: a launch must miss what the study expects of it to be flagged as an outlier, and by
#: which a re-measurement must disagree with it to drop it. The three-sigma limit of
#: Shewhart's control charts: under the noise model, one false flag in ~370 launches
#: (two-sided), and a false flag costs one launch.
OUTLIER_Z = 3.0
#: Outlier verdicts (:func:`outlier_verdicts`): awaiting its re-measurement, confirmed by
#: it, or dropped as a glitch.
PENDING, KEPT, DROPPED = "pending", "kept", "dropped"
#: Share of the study's best launch below which a launch enters the model that pools the
#: estimates at that share: it says its configuration is bad, not by how much. The model
#: is log-additive and a launch can fall off a cliff it cannot represent (a closed-loop
#: level of long prompts that never got past prefill measures 0.3% of the best): fitted as
#: measured, its blame lands on the values it shares with good launches as well, the other
#: side of it lifts the values it does not, and a configuration measured once at 84% of the
#: best was pooled at 110% and recommended. Half, not fitted: below the pruner's bar for a
#: finished level (:data:`tuner.pruning.LATER_LEVEL_RATIO`), so nothing that could lead is
#: touched.
BAD_SHARE = 0.5


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
    #: Of ``numbers``, launches flagged as outliers and not re-measured yet: the
    #: configuration is recommended over no configuration without one.
    pending: tuple[int, ...] = ()
    #: Probability that the configuration meets the objective's floor, given its launches
    #: and the run-to-run noise (see :func:`floor_odds`); 1 without a floor.
    floor_odds: float = 1.0
    #: Target/proxy ratio of the configuration (:func:`target_factor`), by which its proxy
    #: launches count in ``values``; None where no target launch measured it.
    proxy_factor: float | None = None

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


def floor_odds(launches: Sequence[FrozenTrial], noise: float) -> float:
    """Probability that a configuration's true single-stream rate meets the objective's
    floor (``min_single_stream``), from its launches: the mean margin over the standard
    error of ``noise`` (relative, per launch) times the floor. A configuration measured at
    59.2 and 60.6 tok/s under a 60 tok/s floor meets it on average and is a coin flip on
    the host; its peak is discounted accordingly when the recommendation is chosen, since
    the floors of a serving space sit where the best configurations trade single-stream
    speed for throughput. 1 for an objective without a floor."""
    margins, floors = [], []
    for t in launches:
        c = t.constraints.get("min_single_stream")
        single = TrialRecord.of(t).single if c is not None else None
        if c is None or single is None:
            continue
        margins.append(-c)
        floors.append(single + c)
    if not margins:
        return 1.0
    se = noise * (sum(floors) / len(floors)) / math.sqrt(len(margins))
    return normal_cdf((sum(margins) / len(margins)) / max(se, 1e-9))


def normal_cdf(z: float) -> float:
    """P(Z <= z) for a standard normal Z."""
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


#: :data:`FLOOR_SE` as a probability (:func:`floor_odds`): 97.7%.
FLOOR_CONFIDENCE = normal_cdf(FLOOR_SE)


def near_floor(
    trials: Sequence[FrozenTrial], noise: float, within_sd: float, max_runs: int
) -> FrozenTrial | None:
    """Of the configurations that miss the objective's floor on average (see
    :func:`feasible_on_average`), the first launch of the one most likely to meet it
    (:func:`floor_odds`), when its mean misses by no more than ``within_sd`` standard errors
    and it has fewer than ``max_runs`` launches: a miss that one more launch may reverse.
    None when no configuration is that close."""
    groups = by_configuration(t for t in trials if launched(t) and "min_single_stream" in t.constraints)
    bar = normal_cdf(-within_sd)
    near = [
        (odds, ts[0])
        for ts in groups.values()
        if len(ts) < max_runs and not feasible_on_average(ts) and (odds := floor_odds(ts, noise)) >= bar
    ]
    return max(near, key=lambda pt: (pt[0], -pt[1].number))[1] if near else None


def observed(t: FrozenTrial) -> float | None:
    """What a trial measured of the objective: the value of a :func:`measured` trial, the
    partial value of a pruned one (over the levels it ran, a level stopped before it drained
    counting the optimistic projection it was stopped on: :mod:`tuner.level_watch`; such a
    trial is far below the best anyway), None for the rest."""
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
    #: Each flagged launch's verdict (:func:`outlier_verdicts`), by trial number.
    outliers: dict[int, str] = field(default_factory=dict)

    def leader(self) -> Estimate | None:
        """The best configuration (see :func:`leader`), whatever it was measured on."""
        return leader(self.estimates, self.noise) if self.estimates else None

    def recommended(self) -> Estimate | None:
        """The configuration to recommend: of those that meet the objective's floor with
        confidence (:data:`FLOOR_CONFIDENCE`; all while none does), the best measured on the
        target workload, or the best of them while none is; one with an outlier awaiting its
        re-measurement only where every configuration has one. The single-stream level is
        part of the proxy, so a proxy launch measures the floor as a target launch does.

        The walk (:meth:`leader`) still starts from a configuration at the edge of the
        floor, where the fastest configurations often sit; the unit handed out must meet
        the floor on the host, not on average over lucky launches."""
        sure = [e for e in self.estimates if not e.pending] or self.estimates
        meets = [e for e in sure if e.floor_odds >= FLOOR_CONFIDENCE]
        pool = meets or sure
        confirmed = [e for e in pool if e.confirmed]
        return leader(confirmed or pool, self.noise) if pool else None


def evidence(trials: Iterable[FrozenTrial]) -> Evidence:
    """Estimates of every configuration measured in ``trials`` (by ``config_key``; the
    trial's parameters where a trial has none), first measured first, pooled by one fit of
    the additive model."""
    trials = sorted(trials, key=lambda t: t.number)
    verdicts = outlier_verdicts(trials)
    # A launch dropped as a glitch counts nowhere; one awaiting its re-measurement counts for
    # its own configuration only (marked pending), not in the model the others are pooled by.
    unsure = {n for n, v in verdicts.items() if v != KEPT}
    groups = by_configuration(t for t in trials if launched(t) and verdicts.get(t.number) != DROPPED)
    groups = {k: ts for k, ts in groups.items() if feasible_on_average(ts)}
    factors = {k: target_factor(ts) for k, ts in groups.items()}
    ests = [
        Estimate(
            k,
            ts[0],
            tuple(on_target_scale(t, t.values[-1], factors[k]) for t in ts),
            tuple(t.number for t in ts),
            tuple(t.number for t in ts if trial_record.fidelity(t) == "target"),
            pending=tuple(t.number for t in ts if verdicts.get(t.number) == PENDING),
            proxy_factor=factors[k],
        )
        for k, ts in groups.items()
    ]
    sigma = noise(ests)
    ests = [replace(e, floor_odds=floor_odds(groups[e.key], sigma)) for e in ests]
    if not ests:
        return Evidence(ests, sigma, None, verdicts)
    fitted = model([t for t in trials if t.number not in unsure], sigma)
    # A configuration that measured nothing (all requests failed) keeps its own mean of 0.
    pooled = [
        replace(e, pooled=fitted.predict(e.trial.params, e.key)) if min(e.values) > 0 else e for e in ests
    ]
    return Evidence(pooled, sigma, fitted, verdicts)


def estimates(trials: Iterable[FrozenTrial]) -> list[Estimate]:
    """One estimate per configuration measured in ``trials`` (see :func:`evidence`)."""
    return evidence(trials).estimates


def model(trials: Iterable[FrozenTrial], sigma: float) -> effects.Effects:
    """The additive model of :mod:`tuner.effects` fitted to what ``trials`` measured, a
    launch below :data:`BAD_SHARE` of the best at that share (:func:`bounded`)."""
    return effects.fit(bounded(observations(trials)), sigma)


def bounded(found: Sequence[effects.Observation]) -> list[effects.Observation]:
    """``found``, each value below :data:`BAD_SHARE` of the highest raised to that share."""
    if not found:
        return []
    bottom = BAD_SHARE * max(o.value for o in found)
    return [o if o.value >= bottom else replace(o, value=bottom) for o in found]


def observations(trials: Iterable[FrozenTrial]) -> list[effects.Observation]:
    """What ``trials`` measured of the objective, one observation per launch (see
    :func:`observed`), proxy launches on the target's scale where their configuration has a
    target launch (:func:`target_factor`)."""
    trials = list(trials)
    factors = {key: target_factor(ts) for key, ts in by_configuration(trials).items()}
    out = []
    for t in trials:
        value = observed(t)
        if value is not None and value > 0:
            key = configuration(t)
            out.append(effects.Observation(t.params, key, on_target_scale(t, value, factors[key])))
    return out


def target_factor(launches: Iterable[FrozenTrial]) -> float | None:
    """The target/proxy ratio of one configuration: the geometric mean, over its launches
    measured on the target in screening order, of the target value over the value of the
    proxy's levels of the same launch (:data:`~tuner.trial_record.PROXY_VALUE`). Both come
    from one launch, so the ratio is free of that launch's luck. None when no launch
    carries it (no target launch, or a proxy that is no part of the target)."""
    logs = [
        math.log(t.values[-1] / pv)
        for t in launches
        if launched(t)
        and trial_record.fidelity(t) == "target"
        and (pv := trial_record.proxy_value(t)) is not None
        and pv > 0
        and t.values[-1] > 0
    ]
    return math.exp(sum(logs) / len(logs)) if logs else None


def on_target_scale(t: FrozenTrial, value: float, factor: float | None) -> float:
    """``value``, measured by trial ``t``, on the target's scale: a proxy launch's times its
    configuration's :func:`target_factor` where there is one. A proxy value is a lower
    bound of the target value (the levels it leaves out may hold the peak); without this,
    a configuration re-measured on the proxy would lose to one re-measured on the target."""
    if factor is None or trial_record.fidelity(t) == "target":
        return value
    return value * factor


def by_configuration(trials: Iterable[FrozenTrial]) -> dict[str, list[FrozenTrial]]:
    """``trials`` grouped by the configuration they measured (:func:`configuration`), each
    group in the order given, groups in the order first seen."""
    groups: dict[str, list[FrozenTrial]] = {}
    for t in trials:
        groups.setdefault(configuration(t), []).append(t)
    return groups


def configuration(t: FrozenTrial) -> str:
    """The configuration a trial measured: its ``config_key``, or its parameters where it
    has none (a trial added by hand)."""
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
    """The estimate with the best score (mean less its standard error) times the odds that
    it meets the objective's floor; on ties the first measured. A configuration with an
    outlier awaiting its re-measurement leads only where every configuration has one."""
    sure = [e for e in ests if not e.pending] or ests
    return max(sure, key=lambda e: (e.score(sigma) * e.floor_odds, -e.trial.number))


def _beyond(t: FrozenTrial, centre: float, sd: float, on_target: bool) -> bool:
    """Whether launch ``t`` lies more than :data:`OUTLIER_Z` deviations ``sd`` from
    ``centre`` (log(objective)), measured on the target workload (``on_target``) or on the
    proxy. Across the two, only one side is impossible: a proxy value is a lower bound of
    the target value, so a proxy launch is off only far above a target centre, and a
    target launch only far below a proxy centre."""
    gap = math.log(t.values[-1]) - centre
    proxy = trial_record.fidelity(t) != "target"
    if proxy and on_target:
        return gap > OUTLIER_Z * sd
    if not proxy and not on_target:
        return gap < -OUTLIER_Z * sd
    return abs(gap) > OUTLIER_Z * sd


def _centre(launches: Sequence[FrozenTrial]) -> tuple[float, bool]:
    """The median launch of ``launches`` (the lower of the middle two of an even number):
    its log(objective), and whether it was measured on the target workload. A launch, not
    an average, so that one glitch among three cannot move it."""
    middle = sorted(launches, key=lambda t: t.values[-1])[(len(launches) - 1) // 2]
    return math.log(middle.values[-1]), trial_record.fidelity(middle) == "target"


def outlier_verdicts(trials: Sequence[FrozenTrial]) -> dict[int, str]:
    """Verdicts on the launches of configurations with a launch flagged as an outlier
    (:data:`trial_record.OUTLIER`), by trial number.

    With three launches or more, the launches vote: one beyond :data:`OUTLIER_Z` standard
    deviations *above* their median (:func:`_centre`, :func:`_beyond`; a launch's noise
    against the others' centre) is :data:`DROPPED`, flagged or not (an earlier glitch that
    a re-measurement exposed), and a flagged one that is not is :data:`KEPT`. With two, a
    launch flagged against the model (the first of its configuration) is judged by the
    later one; a launch flagged for disagreeing with the earlier one cannot be told from
    it, so it stays :data:`PENDING` (as a single flagged launch does) until a third
    decides. The noise is the study's, from the configurations with no flagged launch.

    A launch far *below* its configuration's others is kept, never dropped: it is what
    the configuration did on the host, and a recommendation must not rest on leaving out
    its own slow runs. The glitch that misleads a study is the one that overstates (a
    server measuring 3x); a slow launch of a fast configuration only makes the study more
    careful. The noise is one figure for the whole study, while a configuration at the
    edge of a latency limit spreads far wider than that (a goodput objective counts only
    the requests that meet the limit): on the long-prompt suite space (TTFT <= 5 s) one
    measured 2050, 1595 and 2050 tok/s of goodput, its noise-free value 1717; with
    the slow launch dropped as a glitch it was recommended at 85% of the best (seed 10)."""
    flagged = {t.number for t in trials if launched(t) and trial_record.OUTLIER in t.user_attrs}
    if not flagged:
        return {}
    groups = by_configuration(t for t in trials if launched(t) and t.values[-1] > 0)
    sigma = noise(  # from the configurations not in doubt: a glitch would widen it
        Estimate(k, ts[0], tuple(t.values[-1] for t in ts), tuple(t.number for t in ts))
        for k, ts in groups.items()
        if not any(t.number in flagged for t in ts)
    )
    verdicts: dict[int, str] = {}
    for launches in groups.values():
        doubted = [t for t in launches if t.number in flagged]
        if not doubted:
            continue
        if len(launches) >= 3:
            centre, on_target = _centre(launches)
            sd = sigma * math.sqrt(1.0 + 1.0 / (len(launches) - 1))
            for t in launches:
                if _beyond(t, centre, sd, on_target) and math.log(t.values[-1]) > centre:
                    verdicts[t.number] = DROPPED
                elif t.number in flagged:
                    verdicts[t.number] = KEPT
            continue
        for t in doubted:
            others = [o for o in launches if o is not t]
            if not others or others[0].number < t.number:
                verdicts[t.number] = PENDING
                continue
            later = others[0]
            on_target = trial_record.fidelity(later) == "target"
            off = _beyond(t, math.log(later.values[-1]), sigma * math.sqrt(2.0), on_target)
            verdicts[t.number] = DROPPED if off and t.values[-1] > later.values[-1] else KEPT
    return verdicts


def outlier(trials: Sequence[FrozenTrial], launch: FrozenTrial) -> dict[str, float] | None:
    """Whether ``launch`` (a launched trial, not among ``trials``) is an outlier against the
    study's noise model. Only a launch that bears on the recommendation is judged: one
    that would change it, or a launch of the recommended configuration. Its value is an
    outlier when it lies more than :data:`OUTLIER_Z` standard deviations from what the
    study expects of it: the mean of its configuration's earlier launches (one launch's
    noise against their mean; those of its own fidelity where there are some, else
    one-sided, see :func:`_beyond`), or, for a first launch, the additive model's
    prediction from the other launches, at most the study's best launch (the prediction's
    own deviation, wide for values the study has not measured, and one launch's noise).
    Returns what to record (the expected value, the measured one, the distance in standard
    deviations), else None. A re-measurement of a flagged launch is never flagged itself:
    it is what judges."""
    if not launched(launch) or trial_record.OUTLIER_CHECK in launch.user_attrs or launch.values[-1] <= 0:
        return None
    before = evidence(trials)
    if before.model is None:
        return None
    key = configuration(launch)
    was = before.recommended()
    after = evidence([*trials, launch]).recommended()
    changes = after is not None and (was is None or after.key != was.key)
    if not changes and (was is None or was.key != key):
        return None
    dropped = {n for n, v in before.outliers.items() if v == DROPPED}
    earlier = [
        t
        for t in trials
        if launched(t) and configuration(t) == key and t.values[-1] > 0 and t.number not in dropped
    ]
    same = [t for t in earlier if trial_record.fidelity(t) == trial_record.fidelity(launch)]
    ref = same or earlier
    if ref:
        centre = sum(math.log(t.values[-1]) for t in ref) / len(ref)
        sd = before.noise * math.sqrt(1.0 + 1.0 / len(ref))
        off = _beyond(launch, centre, sd, trial_record.fidelity(ref[0]) == "target")
    else:
        # A value no earlier launch ran may do anything (1 -> 8 sequences per batch is 3-4x):
        # the prediction rests on evidence only when every value was launched before.
        ran = [t for t in trials if launched(t) or t.state == TrialState.PRUNED]
        seen = {(n, repr(v)) for t in ran for n, v in t.params.items()}
        if any((n, repr(v)) not in seen for n, v in launch.params.items()):
            return None
        centre, spread = before.model.predict(launch.params, key)
        # The study expects no more of a configuration than the best it has measured: past
        # that the model extrapolates (two gains measured apart need not stack), and a
        # launch that falls short of an extrapolation is no glitch.
        top = max((v for e in before.estimates for v in e.values if v > 0), default=None)
        if top is not None:
            centre = min(centre, math.log(top))
        sd = math.hypot(spread, before.noise)
        off = abs(math.log(launch.values[-1]) - centre) > OUTLIER_Z * sd
    if not off:
        return None
    z = (math.log(launch.values[-1]) - centre) / sd
    return {"expected": math.exp(centre), "measured": launch.values[-1], "z": round(z, 2)}


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
