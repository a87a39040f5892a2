"""Judging configurations by all their launches: the winner's curse and the final re-measurements."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tests.test_study import make_search
from tuner import estimates
from tuner.budget import verdicts
from tuner.estimates import best_record
from tuner.sim.serving import DEFAULT_NOISE
from tuner.space import load_space, resolve_space
from tuner.trial_record import MODEL_PICK, REPEAT_OF

REFERENCE = "kimi-k2.6-8x-rtx-pro-6000"
DIST = {"ep_size": CategoricalDistribution([1, 4, 8])}


def _trial(number: int, ep_size: int, value: float, **attrs) -> optuna.trial.FrozenTrial:
    t = optuna.trial.create_trial(
        params={"ep_size": ep_size},
        distributions=DIST,
        value=value,
        state=TrialState.COMPLETE,
        user_attrs={"outcome": "complete", "config_key": f"ep{ep_size}", **attrs},
    )
    t.number = number
    return t


def test_a_confirmed_configuration_beats_one_lucky_run_within_the_noise():
    trials = [_trial(0, 8, 1000.0), _trial(1, 8, 990.0), _trial(2, 4, 998.0)]
    best = estimates.best(trials)
    assert best is not None and best.key == "ep8" and best.runs == 2 and best.numbers == (0, 1)
    assert best.mean == pytest.approx(995.0)


def test_a_lead_far_beyond_the_noise_wins_on_one_run():
    trials = [_trial(0, 8, 1000.0), _trial(1, 8, 990.0), _trial(2, 4, 1100.0)]
    best = estimates.best(trials)
    assert best is not None and best.key == "ep4" and best.runs == 1


def test_reused_infeasible_and_pruned_trials_add_no_measurement():
    reused = _trial(1, 4, 1010.0, reused_from=0)
    infeasible = _trial(2, 1, 5000.0, violations={"min_single_stream": 3.0})
    pruned = _trial(3, 8, 4000.0)
    pruned.state = TrialState.PRUNED
    ests = estimates.estimates([_trial(0, 4, 1010.0), reused, infeasible, pruned])
    assert [(e.key, e.runs) for e in ests] == [("ep4", 1)]


def test_a_configuration_is_feasible_by_all_its_launches_not_its_luckiest():
    # ep8 met a 60 tok/s single-stream floor in one launch of three (61, 58, 59): on average
    # it misses the floor, so the configuration that meets it every time is recommended.
    def floored(number: int, ep_size: int, value: float, single: float) -> optuna.trial.FrozenTrial:
        shortfall = 60.0 - single
        attrs = {"violations": {"min_single_stream": shortfall}} if shortfall > 0 else {}
        t = _trial(number, ep_size, value, **attrs)
        t.system_attrs["constraints:min_single_stream"] = shortfall
        return t

    trials = [floored(0, 8, 1200.0, 61.0), floored(1, 4, 1000.0, 70.0), floored(2, 8, 1190.0, 58.0)]
    assert estimates.best(trials[:2]).key == "ep8"  # one launch: it met the floor
    trials.append(floored(3, 8, 1210.0, 59.0))
    best = estimates.best(trials)
    assert best is not None and best.key == "ep4"
    assert "ep8" not in {e.key for e in estimates.estimates(trials)}


def test_noise_is_learnt_from_repeats_and_starts_at_the_prior():
    assert estimates.noise([]) == pytest.approx(estimates.NOISE_PRIOR)
    noisy = estimates.estimates([_trial(i, 8, v) for i, v in enumerate([900.0, 1100.0, 950.0, 1050.0])])
    assert estimates.noise(noisy) > 2 * estimates.NOISE_PRIOR
    steady = estimates.estimates([_trial(i, 8, v) for i, v in enumerate([1000.0, 1000.5, 999.5, 1000.0])])
    assert estimates.noise(steady) < estimates.NOISE_PRIOR


def test_the_end_of_the_budget_relaunches_the_leaders_and_best_rests_on_them(space, workdir: Path):
    """Run-to-run noise on (the simulator's default): the last trials of the budget re-measure
    the leading configurations, as new launches even though reuse is on."""
    budget = 16
    search = make_search(space, budget, noise=DEFAULT_NOISE, seed=3)
    search.run()
    trials = sorted(search.study.get_trials(), key=lambda t: t.number)
    assert verdicts(trials) == budget  # rejected proposals are recorded, not counted
    repeats = [t for t in trials if REPEAT_OF in t.user_attrs]
    assert repeats, "no leading configuration was launched again"
    last = budget - min(5, budget // 8)
    for t in repeats:
        original = trials[t.user_attrs[REPEAT_OF]]
        assert t.number >= last
        assert t.user_attrs["config_key"] == original.user_attrs["config_key"]
        assert "reused_from" not in t.user_attrs and t.user_attrs["server_s"] > 0
        assert t.value != original.value  # a new launch, with its own noise
    best = best_record(search.study)
    assert best is not None and best.mean is not None and best.estimate is not None
    runs = [t for t in trials if t.number in best.runs]
    assert {t.user_attrs["config_key"] for t in runs} == {best.attrs["config_key"]}
    assert best.mean == pytest.approx(sum(t.value for t in runs) / len(runs))


def test_the_end_of_the_budget_launches_the_models_pick(workdir: Path):
    """The additive model's pick, on the reference space: in the last trials, the leader of
    the moment with the changes the whole study favours, a configuration not measured
    before."""
    budget = 24
    # Low noise: the model changes only what it can tell from noise (MODEL_PICK_Z).
    search = make_search(load_space(resolve_space(REFERENCE)), budget, noise=0.005, seed=5)
    search.run()
    trials = sorted(search.study.get_trials(), key=lambda t: t.number)
    picks = [t for t in trials if MODEL_PICK in t.user_attrs]
    assert picks, "the model picked nothing"
    last = budget - min(5, budget // 8)
    for t in picks:
        leader = trials[t.user_attrs[MODEL_PICK]]
        assert t.number >= last and "reused_from" not in t.user_attrs
        assert t.params != leader.params
        earlier = {u.user_attrs.get("config_key") for u in trials[: t.number]}
        assert t.user_attrs["config_key"] not in earlier
