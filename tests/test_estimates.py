"""Judging configurations by all their launches: the winner's curse and the final re-measurements."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tests.test_study import make_search
from tuner import estimates, verdict
from tuner.budget import verdicts
from tuner.cli import main
from tuner.estimates import best_record
from tuner.measurers import Measurer, SimMeasurer
from tuner.metrics import HELD_BACK_RATIO
from tuner.objectives import Objective
from tuner.sim.serving import DEFAULT_NOISE
from tuner.space import load_space, resolve_space
from tuner.study import Search
from tuner.trial_record import MODEL_PICK, OUTLIER, OUTLIER_CHECK, REPEAT_OF

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


def _floor_study(name: str, launches: list[tuple[int, float, float]], budget: int) -> Search:
    """A study of the reference space under a 60 tok/s floor holding ``launches`` (EP size,
    peak, single-stream rate), with its final trials queued."""
    space = load_space(resolve_space(REFERENCE))
    search = Search(
        space,
        SimMeasurer(space.hardware, space.model),
        study_name=name,
        storage=f"sqlite:///studies/{name}.db",
        objective=Objective(min_single_stream=60.0),
        budget=budget,
        warm_start=False,
    )
    for number, (ep_size, peak, single) in enumerate(launches):
        search.study.add_trial(_floor_trial(number, ep_size, peak, single))
    search._queue_final(search.budget - 1)
    return search


def test_a_study_with_nothing_feasible_measures_again_what_missed_the_floor_by_noise(workdir: Path):
    """Under a 60 tok/s single-stream floor no configuration meets it on average: EP4
    measured 59.4 (within two noise deviations: a coin flip at 2% noise), EP8 40. The final
    trial measures EP4 again, on the target workload; a configuration measured three times
    is not measured a fourth, and one far below the floor never is."""

    def study_with(name: str, launches: list[tuple[int, float]]) -> Search:
        return _floor_study(name, [(ep, 1000.0 + ep, single) for ep, single in launches], budget=8)

    def queued(search: Search) -> list[optuna.trial.FrozenTrial]:
        return search.study.get_trials(states=(TrialState.WAITING,))

    near = study_with("near", [(8, 40.0), (4, 59.4)])
    (again,) = queued(near)
    assert again.system_attrs["fixed_params"] == {"ep_size": 4}
    assert again.user_attrs[REPEAT_OF] == 1 and again.user_attrs["fidelity"] == "target"
    assert not queued(study_with("thrice", [(8, 40.0), (4, 59.4), (4, 59.0), (4, 59.1)]))
    assert not queued(study_with("far", [(8, 40.0), (4, 52.0)]))


def test_a_configuration_that_clears_the_floor_by_less_than_the_noise_is_measured_again_not_handed_out(
    workdir: Path,
):
    """Under a 60 tok/s floor, EP8 measured 30% more throughput than EP4 and 61.5 tok/s
    single-stream in its one launch: within two noise deviations of the floor (a
    configuration 0.2% under it on the host measures that in about one launch in ten), so the
    unit handed out is EP4, which clears it by 10 tok/s, while the final trials measure EP8
    again. The walk still starts from EP8 (the fastest configurations sit at the floor)."""

    def study_with(name: str, launches: list[tuple[int, float, float]]) -> Search:
        return _floor_study(name, launches, budget=10)

    safe = [(4, 1000.0, 70.0), (4, 1004.0, 70.4)]
    edge = study_with("edge", [*safe, (8, 1300.0, 61.5)])
    ev = estimates.evidence(edge.study.get_trials())
    assert estimates.floor_odds([edge.study.trials[2]], ev.noise) < estimates.FLOOR_CONFIDENCE
    assert ev.leader().key == "ep8" and ev.recommended().key == "ep4"
    (again,) = edge.study.get_trials(states=(TrialState.WAITING,))
    assert again.system_attrs["fixed_params"] == {"ep_size": 8} and again.user_attrs[REPEAT_OF] == 2

    # Launched three times and still at the edge: no fourth launch, and EP4 is the unit.
    thrice = study_with("thrice", [*safe, (8, 1300.0, 60.9), (8, 1290.0, 60.2), (8, 1310.0, 60.6)])
    assert estimates.best(thrice.study.get_trials()).key == "ep4"
    assert not any(
        t.user_attrs.get(REPEAT_OF) == 2 for t in thrice.study.get_trials(states=(TrialState.WAITING,))
    )
    # Clear of the floor by far more than the noise, the faster configuration wins as before.
    clear = study_with("clear", [*safe, (8, 1300.0, 75.0)])
    assert estimates.best(clear.study.get_trials()).key == "ep8"


def test_the_verdict_says_how_sure_the_winner_meets_the_floor(workdir: Path):
    def verdict_of(name: str, launches: list[tuple[int, float, float]]) -> verdict.Verdict:
        study = optuna.create_study(study_name=name, direction="maximize")
        for number, (ep_size, peak, single) in enumerate(launches):
            study.add_trial(_floor_trial(number, ep_size, peak, single))
        found = verdict.verdict(study)
        assert found is not None
        return found

    sure = verdict_of("sure", [(4, 1000.0, 70.0), (4, 1004.0, 70.4)])
    assert sure.floor_odds is not None and sure.floor_odds > 0.999
    assert "single-stream floor: met with 100.0% confidence over 2 launches" in sure.lines()
    assert sure.as_dict()["floor_odds"] == sure.floor_odds
    # Nothing clears the floor by two standard errors: the verdict says so and what to do.
    (line,) = [x for x in verdict_of("edge", [(8, 1300.0, 61.0)]).lines() if x.startswith("single-stream")]
    assert "no configuration clears it" in line and "lower the floor" in line
    # An objective without a floor prints no floor line.
    plain = optuna.create_study(direction="maximize")
    plain.add_trial(_trial(0, 8, 1000.0))
    found = verdict.verdict(plain)
    assert found is not None and found.floor_odds is None
    assert not any(x.startswith("single-stream") for x in found.lines())


def test_the_verdict_says_when_requests_waited_for_room_to_start_and_which_limit_held_them():
    """On the reference host at C=256 and 2048 tokens, a memory fraction of 0.86 leaves too
    little KV cache for every request to start at once: the verdict names the level, the
    TTFT tail and, from the server's own running-request cap (256, not below C), the KV cache.
    A cap of 128 with room in the KV cache holds half of them back instead, and the verdict
    says so. At C=32 nothing waits, and the verdict says nothing of it."""
    space = load_space(resolve_space(REFERENCE))

    def verdict_at(levels: tuple[int, ...], **params: Any) -> verdict.Verdict:
        base = {"layout": "tp8", "ep_size": 8, "mem_fraction_static": 0.86, "max_running_requests": 256}
        spec = space.render(space.complete({**base, **params}))
        m = SimMeasurer(space.hardware, space.model, noise=0.0).measure(
            spec,
            space.workload,
            Objective(),
            trial_label="x",
            seed=0,
            on_level=lambda *_: True,
            levels=levels,
        )
        peak = max(lv.output_tok_s for lv in m.levels)
        study = optuna.create_study(direction="maximize")
        levels_attr = [lv.model_dump(exclude_none=True) for lv in m.levels]
        study.add_trial(_trial(0, 8, peak, levels=levels_attr, server_info=m.server_info))
        found = verdict.verdict(study)
        assert found is not None
        return found

    full = verdict_at((32, 256))
    held = full.held_back()
    assert held is not None and held["concurrency"] == 256 and held["request_cap"] >= 256
    assert held["ttft_s_p99"] > HELD_BACK_RATIO * held["ttft_s_p50"]
    (line,) = [x for x in full.lines() if "waited for room" in x]
    assert line.startswith("at C=256: requests waited for room to start (TTFT p99 ")
    assert "the KV cache was full" in line and "a higher request cap" not in line
    assert full.as_dict()["held_back"] == held

    capped = verdict_at((32, 256), max_running_requests=128, mem_fraction_static=0.92)
    held = capped.held_back()
    assert held is not None and held["request_cap"] == 128
    (line,) = [x for x in capped.lines() if "waited for room" in x]
    assert "at most 128 requests at once, fewer than C=256" in line and "a higher request cap" in line

    light = verdict_at((32,))
    assert light.held_back() is None and light.as_dict()["held_back"] is None
    assert not any("waited for room" in x for x in light.lines())


def test_a_server_that_reports_no_request_cap_leaves_both_limits_named():
    assert verdict.running_request_cap({}) is None
    assert verdict.running_request_cap({"max_running_requests": None, "internal_states": []}) is None
    # SGLang's scheduler reports the cap it resolved (below the flag where the KV pool is small).
    info = {"max_running_requests": 512, "internal_states": [{"max_running_requests": 300}]}
    assert verdict.running_request_cap(info) == 300
    assert verdict.running_request_cap({"max_running_requests": 256}) == 256


def test_the_end_of_the_budget_launches_the_models_pick(workdir: Path):
    """The additive model's pick, on the reference space: in the last trials, the leader with
    the changes the whole study favours beyond noise, a configuration not measured before.
    Here memory fraction 0.94 measured 6% above 0.92 under three layouts, and the leader
    (EP8 at 0.92) was never launched at 0.94."""
    space = load_space(resolve_space(REFERENCE))
    search = Search(
        space,
        SimMeasurer(space.hardware, space.model),
        study_name="pick",
        storage="sqlite:///studies/pick.db",
        objective=Objective(),
        budget=12,
        warm_start=False,
    )
    base = space.start_points()[1]  # TP8 + EP8, SGLang's defaults
    distributions = space.distributions()
    launches = [(8, 0.92, 2200.0), (4, 0.92, 2000.0), (4, 0.94, 2120.0), (1, 0.92, 1800.0)]
    launches += [(1, 0.94, 1910.0), (2, 0.92, 1900.0), (2, 0.94, 2015.0)]
    for ep, mem, value in launches:
        params = {**base, "ep_size": ep, "mem_fraction_static": mem}
        t = optuna.trial.create_trial(
            params=params,
            distributions={k: distributions[k] for k in params},
            value=value,
            state=TrialState.COMPLETE,
            user_attrs={"outcome": "complete", "config_key": space.key(params), "fidelity": "target"},
        )
        search.study.add_trial(t)
    search._queue_final(search.budget - 1)
    (pick,) = search.study.get_trials(states=(TrialState.WAITING,))
    assert pick.user_attrs[MODEL_PICK] == 0 and pick.user_attrs["fidelity"] == "target"
    assert pick.system_attrs["fixed_params"] == {**base, "ep_size": 8, "mem_fraction_static": 0.94}


# --------------------------------------------------------------------------- outliers


def test_a_flagged_launch_waits_for_its_re_measurement_then_is_kept_or_dropped():
    flagged = {"outlier": {"expected": 700.0, "measured": 3000.0, "z": 9.0}}
    trials = [_trial(0, 8, 1000.0), _trial(1, 4, 990.0), _trial(2, 1, 3000.0, **flagged)]
    ev = estimates.evidence(trials)
    assert ev.outliers == {2: estimates.PENDING}
    assert ev.recommended().key == "ep8"  # not the single flagged launch
    dropped = estimates.evidence([*trials, _trial(3, 1, 710.0, outlier_check=2)])
    assert dropped.outliers == {2: estimates.DROPPED}
    assert [e.numbers for e in dropped.estimates if e.key == "ep1"] == [(3,)]  # the glitch counts nowhere
    kept = estimates.evidence([*trials, _trial(3, 1, 2950.0, outlier_check=2)])
    assert kept.outliers == {2: estimates.KEPT}
    assert kept.recommended().key == "ep1" and kept.recommended().numbers == (2, 3)  # pooled as usual


def test_a_re_measurement_that_disagrees_with_the_leader_asks_a_third_launch_to_vote():
    """The glitch went unnoticed (its configuration's values were new to the study), and the
    leader's re-measurement disagrees with it: two launches cannot tell which is wrong, a
    third decides by the median, and the glitch is dropped."""
    disagrees = {"outlier": {"expected": 3000.0, "measured": 1000.0, "z": -39.0}}
    trials = [_trial(0, 8, 3000.0), _trial(1, 4, 990.0), _trial(2, 8, 1000.0, **disagrees)]
    ev = estimates.evidence(trials)
    assert ev.outliers == {2: estimates.PENDING} and ev.recommended().key == "ep4"
    voted = estimates.evidence([*trials, _trial(3, 8, 1010.0, outlier_check=2)])
    assert voted.outliers == {0: estimates.DROPPED, 2: estimates.KEPT}
    assert voted.recommended().key == "ep8" and voted.recommended().numbers == (2, 3)


def test_a_slow_launch_of_the_leader_is_kept_not_dropped_as_a_glitch():
    """A goodput at the edge of its latency limit: two launches at 2050, one at 1595. The
    slow one is what the configuration did on the host, so the leader's estimate counts it
    and a configuration steady at 1980 is recommended; dropped as a glitch, 2050 would be."""
    slow = {"outlier": {"expected": 2050.0, "measured": 1595.0, "z": -8.9}}
    steady = [_trial(0, 8, 1980.0), _trial(1, 8, 1975.0), _trial(2, 8, 1985.0)]
    trials = [*steady, _trial(3, 4, 2050.0), _trial(4, 4, 1595.0, **slow)]
    ev = estimates.evidence([*trials, _trial(5, 4, 2050.0, outlier_check=4)])
    assert ev.outliers == {4: estimates.KEPT}
    (ep4,) = [e for e in ev.estimates if e.key == "ep4"]
    assert ep4.numbers == (3, 4, 5) and ep4.mean == pytest.approx((2050 + 1595 + 2050) / 3)
    assert ev.recommended().key == "ep8"
    # With two launches, a slow first launch is kept by a faster re-measurement as well.
    first = [*steady, _trial(3, 4, 1595.0, **slow), _trial(4, 4, 2050.0, outlier_check=3)]
    assert estimates.evidence(first).outliers == {3: estimates.KEPT}


def test_a_launch_far_above_what_the_study_expects_is_an_outlier_when_it_would_lead():
    trials = [_trial(0, 8, 1000.0), _trial(1, 4, 990.0), _trial(2, 1, 700.0), _trial(3, 8, 1010.0)]
    glitch = estimates.outlier(trials, _trial(4, 1, 2100.0))  # 3x its earlier launch
    assert glitch is not None and glitch["z"] > estimates.OUTLIER_Z
    assert glitch["expected"] == pytest.approx(700.0, rel=0.05) and glitch["measured"] == 2100.0
    assert estimates.outlier(trials, _trial(4, 1, 712.0)) is None  # within the noise
    assert estimates.outlier(trials, _trial(4, 1, 1500.0, outlier_check=2)) is None  # a re-measurement judges
    # Far from expected but not changing the recommendation: nothing to protect.
    assert estimates.outlier(trials, _trial(4, 1, 350.0)) is None


#: Two knobs: an NCCL protocol and a channel count.
NCCL = {"proto": CategoricalDistribution(["auto", "LL"]), "channels": CategoricalDistribution([0, 8])}


def _nccl_launch(number: int, proto: str, channels: int, value: float, *, pruned: bool = False):
    state, attrs = TrialState.COMPLETE, {"outcome": "complete"}
    if pruned:  # stopped after its first level; what that level measured is its partial value
        state, attrs = TrialState.PRUNED, {"outcome": "pruned", "partial_value": value}
    t = optuna.trial.create_trial(
        params={"proto": proto, "channels": channels},
        distributions=NCCL,
        value=None if pruned else value,
        state=state,
        user_attrs={**attrs, "config_key": f"{proto}-{channels}"},
    )
    t.number = number
    return t


def test_a_launch_that_fell_off_a_cliff_does_not_lift_the_configurations_it_shares_nothing_with():
    """LL with 8 channels measured 300; LL alone never got past prefill (1.2 tok/s, pruned).
    Taken at its word, the log-additive model credits 8 channels with a 250x gain, and a
    configuration measured once at 600 would be pooled far above anything launched. The
    cliff says "bad", not how bad: the pooled estimate stays near what was measured."""
    trials = [
        _nccl_launch(0, "auto", 0, 440.0),
        _nccl_launch(1, "auto", 0, 445.0),
        _nccl_launch(2, "LL", 8, 300.0),
        _nccl_launch(3, "LL", 0, 1.2, pruned=True),
        _nccl_launch(4, "auto", 8, 600.0),
    ]
    ev = estimates.evidence(trials)
    pooled = next(e for e in ev.estimates if e.key == "auto-8").pooled
    assert pooled is not None
    assert 440.0 < math.exp(pooled[0]) <= 600.0 * 1.02


def test_a_configuration_that_combines_two_gains_is_not_an_outlier_for_gaining_less_than_their_sum():
    """Each knob gained 30% alone; both together measured 35%, a new best. The additive model
    expects 69%, beyond anything the study measured: gains need not stack, and a launch is
    not doubted for falling short of an extrapolation."""
    trials = [
        _nccl_launch(0, "auto", 0, 1000.0),
        _nccl_launch(1, "auto", 0, 1005.0),
        _nccl_launch(2, "LL", 0, 1300.0),
        _nccl_launch(3, "auto", 8, 1300.0),
        _nccl_launch(4, "LL", 0, 1310.0),
        _nccl_launch(5, "auto", 8, 1295.0),
    ]
    assert estimates.outlier(trials, _nccl_launch(6, "LL", 8, 1350.0)) is None


class GlitchedServer(Measurer):
    """STAND-IN for a glitched server: the simulator, except that one launch (``label``)
    measures ``factor`` times its real throughput at every level, as a server whose clock
    stalled or whose answers came from a cache would."""

    backend = "sim"

    def __init__(self, inner: Measurer, label: str, factor: float = 3.0):
        self.inner, self.label, self.factor = inner, label, factor

    def measure(
        self, spec, workload, objective, *, trial_label, seed, on_level, levels=None, launch=0, watch=None
    ):
        def inflated(i, metrics, goodput):
            if trial_label == self.label:  # the measurement's own record, seen by the study
                metrics.output_tok_s *= self.factor
            return on_level(i, metrics, goodput)

        return self.inner.measure(
            spec,
            workload,
            objective,
            trial_label=trial_label,
            seed=seed,
            on_level=inflated,
            levels=levels,
            launch=launch,
            watch=watch,
        )


#: Six configurations of the small space measured in this order (every value of the sixth
#: measured before it), then one more queued behind them.
GLITCH_PLAN = [(8, False, False), (4, False, False), (1, False, False), (8, False, True), (4, False, True),
               (1, False, True), (8, True, False)]  # fmt: skip
GLITCHED = 5


def _glitched_study(space, budget: int) -> Search:
    search = Search(
        space,
        GlitchedServer(SimMeasurer(space.hardware, space.model, noise=DEFAULT_NOISE), f"trial-{GLITCHED}"),
        study_name="small",
        storage="sqlite:///studies/small.db",
        objective=Objective(),
        seed=1,
        budget=budget,
        prune=False,
    )
    for ep, eplb, no_graph in GLITCH_PLAN:
        search.study.enqueue_trial({"ep_size": ep, "enable_eplb": eplb, "disable_cuda_graph": no_graph})
    search.run()
    return search


def _best_json(capsys) -> dict:
    capsys.readouterr()
    assert main(["best", "--study", "small", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_glitched_launch_is_measured_again_first_and_best_is_not_fooled(space, workdir: Path, capsys):
    search = _glitched_study(space, 8)
    trials = sorted(search.study.get_trials(), key=lambda t: t.number)
    glitch = trials[GLITCHED]
    assert glitch.user_attrs[OUTLIER]["z"] > estimates.OUTLIER_Z
    (check,) = [t for t in trials if t.user_attrs.get(OUTLIER_CHECK) == GLITCHED]
    assert check.params == glitch.params and "reused_from" not in check.user_attrs
    # Measured before anything else: before the configuration queued ahead of it.
    queued = trials[len(GLITCH_PLAN) - 1]
    assert check.datetime_start < queued.datetime_start
    honest = [t.value for t in trials if t.number != GLITCHED and estimates.measured(t)]
    assert glitch.value > 2 * max(honest)
    best = _best_json(capsys)
    assert GLITCHED not in best["runs"] and best["estimate"] < 1.1 * max(honest)
    assert estimates.outlier_verdicts(trials) == {GLITCHED: estimates.DROPPED}
    capsys.readouterr()
    assert main(["trials", "--study", "small"]) == 0
    assert "outlier, dropped: its configuration's other launches disagree with it" in capsys.readouterr().out


def test_a_glitched_launch_not_measured_again_yet_is_not_recommended(space, workdir: Path, capsys):
    search = _glitched_study(space, GLITCHED + 1)  # the budget ends with the glitched launch
    assert estimates.outlier_verdicts(search.study.get_trials()) == {GLITCHED: estimates.PENDING}
    best = _best_json(capsys)
    assert best["trial"] != GLITCHED and GLITCHED not in best["runs"]
    assert [o["trial"] for o in best["confidence"]["outliers_re_measuring"]] == [GLITCHED]
    assert main(["best", "--study", "small"]) == 0
    assert f"trial #{GLITCHED}: " in capsys.readouterr().out  # the unit's notes say why it is not named
    assert main(["trials", "--study", "small"]) == 0
    assert "outlier, re-measuring" in capsys.readouterr().out
    # A larger budget measures it again first (ahead of the configuration queued before).
    search.budget += 1
    search.run()
    trials = sorted(search.study.get_trials(), key=lambda t: t.number)
    ran = [t for t in trials if t.number > GLITCHED and t.state == TrialState.COMPLETE]
    assert [t.user_attrs.get(OUTLIER_CHECK) for t in ran] == [GLITCHED]
    assert estimates.outlier_verdicts(trials) == {GLITCHED: estimates.DROPPED}


def test_a_proposal_of_the_glitched_configuration_copies_its_re_measurement(space, workdir: Path):
    search = _glitched_study(space, 8)
    glitched = search.study.get_trials()[GLITCHED]
    search.study.enqueue_trial(dict(glitched.params))
    search.budget += 1
    search.run()
    again = search.study.get_trials()[-1]
    (check,) = [t for t in search.study.get_trials() if t.user_attrs.get(OUTLIER_CHECK) == GLITCHED]
    assert again.user_attrs["reused_from"] == check.number and again.value == check.value


def test_a_glitched_launch_sets_no_pruning_bar(space, workdir: Path):
    """Pruning on: the glitched launch's 3x levels would cut every later trial at its first
    level; flagged, they set no bar, and its re-measurement is never cut."""
    search = Search(
        space,
        GlitchedServer(SimMeasurer(space.hardware, space.model, noise=DEFAULT_NOISE), f"trial-{GLITCHED}"),
        study_name="small",
        storage="sqlite:///studies/small.db",
        objective=Objective(),
        seed=1,
        budget=len(GLITCH_PLAN) + 1,
    )
    for ep, eplb, no_graph in GLITCH_PLAN:
        search.study.enqueue_trial({"ep_size": ep, "enable_eplb": eplb, "disable_cuda_graph": no_graph})
    search.run()
    trials = search.study.get_trials()
    (check,) = [t for t in trials if t.user_attrs.get(OUTLIER_CHECK) == GLITCHED]
    assert check.state == TrialState.COMPLETE
    assert estimates.outlier_verdicts(trials) == {GLITCHED: estimates.DROPPED}


def _floor_trial(number: int, ep_size: int, peak: float, single: float, floor: float = 60.0):
    t = optuna.trial.create_trial(
        params={"ep_size": ep_size},
        distributions=DIST,
        value=peak,
        state=TrialState.COMPLETE,
        user_attrs={
            "outcome": "complete",
            "config_key": f"ep{ep_size}",
            "levels": [{"concurrency": 1, "output_tok_s": single}, {"concurrency": 64, "output_tok_s": peak}],
        },
        system_attrs={"constraints:min_single_stream": floor - single},
    )
    t.number = number
    return t


def test_a_configuration_at_the_edge_of_the_floor_is_not_recommended_over_a_safe_one():
    # ep8 meets the 60 tok/s floor on average (60.6 and 59.8 tok/s): a coin flip on the host.
    # ep4 clears it by 10 tok/s at 3% less throughput: that is the configuration to hand out.
    edge = [_floor_trial(0, 8, 500.0, 60.6), _floor_trial(1, 8, 498.0, 59.8)]
    safe = [_floor_trial(2, 4, 485.0, 70.0), _floor_trial(3, 4, 483.0, 70.4)]
    ev = estimates.evidence(edge + safe)
    odds = {e.key: e.floor_odds for e in ev.estimates}
    assert 0.5 < odds["ep8"] < 0.8 and odds["ep4"] > 0.99
    assert ev.recommended().key == "ep4"
    # Far above the floor, the faster configuration wins as before.
    clear = [_floor_trial(0, 8, 500.0, 75.0), _floor_trial(1, 8, 498.0, 76.0)]
    assert estimates.evidence(clear + safe).recommended().key == "ep8"
