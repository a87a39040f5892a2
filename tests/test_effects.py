"""The additive model: small effects pooled across launches, lucky runs discounted, pruned
trials' partial measurements kept."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tuner import effects, estimates, trial_record
from tuner.metrics import LevelMetrics
from tuner.objectives import Objective

NOISE = 0.02


def _observations(n: int, seed: int, effect: float) -> list[effects.Observation]:
    """``n`` launches of random configurations of two flat knobs and one that costs
    ``effect`` (relative) at its value 1, each with NOISE of log-normal run-to-run noise."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        params = {"a": int(rng.integers(4)), "b": int(rng.integers(3)), "steps": int(rng.choice([1, 8]))}
        truth = 1000.0 * (1.0 - effect if params["steps"] == 1 else 1.0)
        value = truth * math.exp(rng.normal(0, NOISE))
        out.append(effects.Observation(params, repr(sorted(params.items())), value))
    return out


def test_an_effect_below_one_launchs_noise_is_resolved_by_pooling():
    """A 3% effect under 2% noise: the difference of one pair of launches has a standard
    deviation of 2.8%, so its sign is a coin toss one time in seven; 40 launches of
    configurations that share the value pin it down."""
    model = effects.fit(_observations(40, seed=1, effect=0.03), NOISE)
    mean, sd = model.gain("steps", 1, 8)
    assert sd < 0.02
    assert abs(mean - math.log(1 / 0.97)) < 2 * sd
    assert mean > 1.5 * sd
    # the flat knobs are estimated flat
    for name, values in (("a", range(1, 4)), ("b", range(1, 3))):
        for v in values:
            m, s = model.gain(name, 0, v)
            assert abs(m) < 3 * s


def test_a_configuration_is_predicted_from_its_values_before_it_is_measured():
    model = effects.fit(_observations(40, seed=2, effect=0.05), NOISE)
    unseen = {"a": 1, "b": 2, "steps": 8}
    mean, sd = model.predict(unseen, key="never launched")
    assert math.exp(mean) == pytest.approx(1000.0, rel=0.02)
    # unknown: the configuration's own deviation is still at its prior
    assert sd == pytest.approx(math.hypot(sd_of_values(model, unseen), effects.CONFIGURATION_PRIOR), rel=1e-6)


def sd_of_values(model: effects.Effects, params: dict) -> float:
    """The model's standard deviation of the sum of the intercept and ``params``' effects,
    from a prediction of a configuration with a known key (whose own deviation term is the
    only difference)."""
    _, sd_with_prior = model.predict(params)
    return math.sqrt(sd_with_prior**2 - effects.CONFIGURATION_PRIOR**2)


DIST = {"steps": CategoricalDistribution([1, 8]), "a": CategoricalDistribution([0, 1, 2, 3])}


def _trial(number: int, steps: int, a: int, value: float, state=TrialState.COMPLETE, **attrs):
    t = optuna.trial.create_trial(
        params={"steps": steps, "a": a},
        distributions=DIST,
        value=value if state == TrialState.COMPLETE else None,
        state=state,
        user_attrs={"outcome": "complete", "config_key": f"s{steps}a{a}", **attrs},
    )
    t.number = number
    return t


def test_a_lucky_run_of_a_value_that_did_poorly_elsewhere_is_discounted():
    """steps=1 measured 8% below steps=8 in three configurations; one launch of another steps=1
    configuration reads 2% above the rest. Alone it would lead; pooled, a steps=8
    configuration does."""
    trials = [_trial(a, 8, a, 1000.0 + 5 * (a % 2)) for a in range(4)]
    trials += [_trial(4 + a, 1, a, 920.0 + 5 * (a % 2)) for a in range(3)]
    trials.append(_trial(7, 1, 3, 1022.0))
    ests = {e.key: e for e in estimates.estimates(trials)}
    lucky = ests["s1a3"]
    assert max(ests.values(), key=lambda e: e.mean) is lucky  # by its own launch it leads
    assert lucky.value < lucky.mean - 10.0  # pooled, it is discounted by over 1%
    best = estimates.best(trials)
    assert best is not None and best.trial.params["steps"] == 8


def test_a_pruned_trial_counts_with_the_objective_it_measured_before_the_cut():
    kept = _trial(1, 1, 0, 0.0, state=TrialState.PRUNED, **{trial_record.PARTIAL_VALUE: 400.0})
    cut_early = _trial(2, 1, 1, 0.0, state=TrialState.PRUNED)
    assert estimates.observed(kept) == 400.0
    assert estimates.observed(cut_early) is None
    # in the model: steps=1 now has a launch at 40% of steps=8's
    trials = [_trial(0, 8, 0, 1000.0), kept, cut_early]
    model = estimates.model(trials, NOISE)
    assert model.gain("steps", 1, 8)[0] > 0.3
    # and it is not a configuration to recommend
    assert {e.key for e in estimates.estimates(trials)} == {"s8a0"}


def _level(c: int, tok_s: float) -> LevelMetrics:
    return LevelMetrics(concurrency=c, output_tok_s=tok_s, wall_s=1.0, completed=c, output_tokens=int(tok_s))


def test_the_partial_objective_of_a_pruned_sweep():
    c1, c64 = _level(1, 40.0), _level(64, 900.0)
    peak = Objective(name="peak")
    assert peak.partial([c1]) is None  # C=1 says nothing about the peak
    assert peak.partial([c1, c64]) == 900.0
    assert Objective(name="single").partial([c1]) == 40.0
    assert Objective(name="pareto").partial([c1, c64]) is None
