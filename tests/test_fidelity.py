"""Target and proxy: the proxy a space screens on, the leaders measured on the target before
a recommendation, and closed-loop windows that count every token streamed inside them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tests.test_study import make_search
from tuner import estimates, fidelity
from tuner.estimates import best_record
from tuner.measurers import SimMeasurer
from tuner.metrics import summarize
from tuner.objectives import Objective
from tuner.sim.emulator_process import EmulatorProcess
from tuner.sim.model import PerfModel
from tuner.sim.serving import DEFAULT_NOISE, simulate_sweep
from tuner.space import load_space, resolve_space
from tuner.study import Search
from tuner.trial_record import FIDELITY, PROXY_VALUE, REPEAT_OF, queued_repeat
from tuner.workload import Workload

REFERENCE = "kimi-k2.6-8x-rtx-pro-6000"
FULL = Workload(levels=(1, 32, 64, 128, 192, 256), max_tokens=2048, single_max_tokens=512)


def test_the_proxy_keeps_the_single_stream_and_the_heaviest_level_at_full_length():
    proxy = fidelity.derive_proxy(FULL)
    assert proxy.levels == (1, 256)
    assert proxy.max_tokens == 2048 and proxy.single_max_tokens == 512  # KV pressure kept
    assert fidelity.is_subset(proxy, FULL)
    assert fidelity.screening_order(proxy, FULL) == (1, 256, 32, 64, 128, 192)
    # Long prompts at a lower level can hold more tokens in flight than short ones above it.
    mixed = Workload(levels=(1, 64, 96), prompt_tokens=8000, max_tokens=256)
    assert fidelity.heaviest_level(mixed) == 96
    # Open-loop levels are rates: no single-stream level to keep.
    assert fidelity.derive_proxy(Workload(kind="poisson", levels=(1, 4, 8))).levels == (8,)


def test_a_proxy_of_other_requests_cannot_be_promoted_in_the_same_launch():
    shorter = FULL.model_copy(update={"levels": (1, 256), "max_tokens": 1024})
    assert not fidelity.is_subset(shorter, FULL)
    assert fidelity.screening_order(shorter, FULL) is None


def test_reference_space_targets_the_full_sweep_and_screens_on_its_heaviest_level():
    space = load_space(resolve_space(REFERENCE))
    assert space.workload == FULL
    assert space.proxy.levels == (1, 256) and space.proxy.max_tokens == 2048


def test_a_bad_proxy_or_trace_in_a_space_names_the_field(tmp_path: Path, workdir: Path):
    base = resolve_space(REFERENCE).read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(base + "\n" + "proxy: sometimes\n")
    with pytest.raises(Exception, match="proxy"):
        load_space(bad)
    trace_space = tmp_path / "trace.yaml"
    (tmp_path / "t.jsonl").write_text('{"prompt_tokens": 10}\n')
    text = base.replace(
        "workload:\n  # The target", "workload:\n  kind: trace\n  trace: t.jsonl\n  # The target"
    )
    text = text.replace("  kind: burst\n  levels: [1, 32", "  levels: [1, 32")
    trace_space.write_text(text)
    with pytest.raises(Exception) as err:
        load_space(trace_space)
    assert "workload.trace" in str(err.value) and "t.jsonl:1" in str(err.value)


def _trial(number: int, ep: int, value: float, fid: str) -> optuna.trial.FrozenTrial:
    t = optuna.trial.create_trial(
        params={"ep_size": ep},
        distributions={"ep_size": CategoricalDistribution([1, 4, 8])},
        value=value,
        state=TrialState.COMPLETE,
        user_attrs={"outcome": "complete", "config_key": f"ep{ep}", FIDELITY: fid},
    )
    t.number = number
    return t


def test_a_proxy_only_leader_does_not_win_over_a_confirmed_configuration():
    trials = [_trial(0, 8, 2000.0, "target"), _trial(1, 4, 2030.0, "proxy")]
    ev = estimates.evidence(trials)
    assert ev.leader() is not None and ev.leader().key == "ep4"  # the screening's leader
    rec = ev.recommended()
    assert rec is not None and rec.key == "ep8" and rec.confirmed
    # While nothing is confirmed, the best screened configuration stands.
    only_proxy = estimates.evidence([_trial(0, 8, 2000.0, "proxy"), _trial(1, 4, 2030.0, "proxy")])
    assert only_proxy.recommended().key == "ep4"


def test_proxy_launches_of_a_configuration_count_on_the_target_scale_of_its_target_launches():
    """A target launch carries the value of the proxy's levels of the same launch; the ratio
    puts the configuration's proxy launches on the target's scale, and a configuration
    never measured on the target keeps its proxy values (a lower bound)."""
    on_target = _trial(0, 8, 2100.0, "target")
    on_target.user_attrs[PROXY_VALUE] = 2000.0
    trials = [on_target, _trial(1, 8, 1900.0, "proxy"), _trial(2, 4, 1950.0, "proxy")]
    ev = estimates.evidence(trials)
    ep8 = next(e for e in ev.estimates if e.key == "ep8")
    ep4 = next(e for e in ev.estimates if e.key == "ep4")
    assert ep8.proxy_factor == pytest.approx(1.05) and ep8.values == pytest.approx((2100.0, 1995.0))
    assert ep4.proxy_factor is None and ep4.values == (1950.0,)
    observed = [o.value for o in estimates.observations(trials)]
    assert observed == pytest.approx([2100.0, 1995.0, 1950.0])


def test_a_repeat_of_a_configuration_measured_on_the_target_runs_the_proxy_alone(workdir: Path):
    """The final re-measurements of a configuration already measured on the target stop after
    the proxy's levels (a quarter of the sweep's server time), never promoted, and count
    through the target launch's ratio."""
    space = load_space(resolve_space(REFERENCE))
    search = make_search(space, 3, noise=DEFAULT_NOISE, seed=1, warm_start=False)
    config = space.start_points()[4]
    search.study.enqueue_trial(config, user_attrs={FIDELITY: "target"})
    search.study.enqueue_trial(config, user_attrs=queued_repeat(0, "proxy"))
    search.study.enqueue_trial({**config, "mem_fraction_static": 0.9}, user_attrs={FIDELITY: "target"})
    search.run()
    first, repeat = sorted(search.study.get_trials(), key=lambda t: t.number)[:2]
    assert [lv["concurrency"] for lv in first.user_attrs["levels"]] == [1, 32, 64, 128, 192, 256]
    proxy_levels = [lv for lv in first.user_attrs["levels"] if lv["concurrency"] in (1, 256)]
    assert first.user_attrs[PROXY_VALUE] == pytest.approx(
        max(lv["output_tok_s"] for lv in proxy_levels), rel=1e-3
    )
    assert repeat.user_attrs[FIDELITY] == "proxy" and repeat.user_attrs[REPEAT_OF] == 0
    assert [lv["concurrency"] for lv in repeat.user_attrs["levels"]] == [1, 256]
    assert repeat.user_attrs["server_s"] < 0.7 * first.user_attrs["server_s"]
    ev = estimates.evidence(search.study.get_trials())
    est = next(e for e in ev.estimates if e.trial.number == 0)
    factor = first.values[-1] / first.user_attrs[PROXY_VALUE]
    assert est.numbers == (0, 1) and est.target_numbers == (0,)
    assert est.values == pytest.approx((first.values[-1], repeat.values[-1] * factor))


def test_a_repeat_of_a_challenger_not_measured_on_the_target_goes_on_to_it_only_where_it_leads(
    workdir: Path,
):
    """The last trial re-measures a challenger whose one launch (on the proxy) was unlucky:
    where its proxy levels beat the leader's estimate, the same launch measures the rest of
    the target (its confirmation costs no second start-up); where they do not, it stops
    after the proxy's levels. Noise off; the leader's and the challenger's first launches
    are written by hand around what the challenger measures."""
    space = load_space(resolve_space(REFERENCE))
    leader = space.start_points()[1]
    challenger = {**leader, "mem_fraction_static": 0.92}

    def study(name: str, budget: int) -> Search:
        measurer = SimMeasurer(space.hardware, space.model, noise=0.0)
        storage = f"sqlite:///studies/{name}.db"
        return Search(
            space,
            measurer,
            study_name=name,
            storage=storage,
            objective=Objective(),
            budget=budget,
            warm_start=False,
        )

    calibration = study("calibration", 1)
    calibration.study.enqueue_trial(challenger)
    calibration.run()
    (measured,) = calibration.study.get_trials()
    v = max(lv["output_tok_s"] for lv in measured.user_attrs["levels"] if lv["concurrency"] in (1, 256))
    distributions = space.distributions()

    def launch(params: dict, value: float, fid: str) -> optuna.trial.FrozenTrial:
        attrs = {"outcome": "complete", "config_key": space.key(params), FIDELITY: fid}
        if fid == "target":
            attrs[PROXY_VALUE] = value
        return optuna.trial.create_trial(
            params=params,
            distributions={k: distributions[k] for k in params},
            value=value,
            state=TrialState.COMPLETE,
            user_attrs=attrs,
        )

    def repeat_with_leader_at(share: float) -> optuna.trial.FrozenTrial:
        search = study(f"leader-at-{share}", 3)
        search.study.add_trial(launch(leader, share * v, "target"))
        search.study.add_trial(launch(challenger, 0.7 * v, "proxy"))
        search.study.enqueue_trial(challenger, user_attrs=queued_repeat(1, "screen"))
        search.run()
        return max(search.study.get_trials(), key=lambda t: t.number)

    leads = repeat_with_leader_at(0.8)
    assert leads.user_attrs[REPEAT_OF] == 1 and leads.user_attrs[FIDELITY] == "target"
    assert [lv["concurrency"] for lv in leads.user_attrs["levels"]] == [1, 32, 64, 128, 192, 256]
    trails = repeat_with_leader_at(1.25)
    assert trails.user_attrs[REPEAT_OF] == 1 and trails.user_attrs[FIDELITY] == "proxy"
    assert [lv["concurrency"] for lv in trails.user_attrs["levels"]] == [1, 256]


def test_a_screened_study_measures_its_recommendation_on_the_target(workdir: Path):
    """Noisy study of the reference space: trials screen on C=1 and C=256, the leaders of the
    last trials go on to every level of the target, and `best` rests on target launches."""
    budget = 16
    search = make_search(load_space(resolve_space(REFERENCE)), budget, noise=DEFAULT_NOISE, seed=2)
    search.run()
    trials = sorted(search.study.get_trials(), key=lambda t: t.number)
    screened = [t for t in trials if t.user_attrs.get(FIDELITY) == "proxy" and t.state == TrialState.COMPLETE]
    confirmed = [
        t for t in trials if t.user_attrs.get(FIDELITY) == "target" and t.state == TrialState.COMPLETE
    ]
    assert screened and confirmed
    for t in screened:
        assert [lv["concurrency"] for lv in t.user_attrs["levels"]] == [1, 256]
    for t in confirmed:
        assert [lv["concurrency"] for lv in t.user_attrs["levels"]] == [1, 32, 64, 128, 192, 256]
        assert t.number >= budget - search.final_window()  # finalists only: the screening is cheap
    best = best_record(search.study)
    assert best is not None and best.target_runs and set(best.target_runs) <= set(best.runs)
    assert best.fidelity == "target" and len(best.levels) == 6


def test_closed_loop_counts_tokens_streamed_inside_the_window():
    """DeepSeek-V3 on 8x H200, TP8, closed loop, 1k prompts and 1k replies (EOS ignored), a
    60 s window: each request takes ~35 s, so counting only requests that finish inside the
    window undercounts; the window's tokens over its length match C / mean TPOT."""
    model = PerfModel.build("h200-sxm-x8", "deepseek-v3", ["--tp-size", "8"])
    wl = Workload(kind="closed-loop", levels=(64,), max_tokens=1024, prompt_tokens=1024, ignore_eos=True)
    (level,) = simulate_sweep(model, wl, seed=0, noise=0.0)
    m = summarize(level)
    assert m.tpot_ms_mean is not None
    expected = 64 / (m.tpot_ms_mean / 1e3)
    assert m.output_tok_s == pytest.approx(expected, rel=0.03)
    finished_only = sum(r.output_tokens for r in level.records if r.end <= level.ended) / 60.0
    assert m.output_tok_s > 1.2 * finished_only


def test_closed_loop_load_generator_counts_cut_requests_like_the_simulator():
    """The same accounting over HTTP: requests still streaming when the window closes count
    their tokens, and the measured rate matches C / TPOT as the simulator's does."""
    from tuner import loadgen

    wl = Workload(
        kind="closed-loop",
        levels=(32,),
        max_tokens=512,
        prompt_tokens=256,
        ignore_eos=True,
        duration_s=15.0,
        ramp_s=2.0,
        warmup_requests=0,
    )
    with EmulatorProcess(["--tp-size", "8"], speedup=20) as emu:
        (level,) = loadgen.measure(emu.url, wl, seed=1)
    m = summarize(level)
    assert level.window and any(r.error == "cut-at-window-end" for r in level.records)
    assert m.failed == 0 and m.tpot_ms_mean is not None
    assert m.output_tok_s == pytest.approx(32 / (m.tpot_ms_mean / 1e3), rel=0.08)
    json.dumps(m.model_dump())  # the metrics stay JSON-able


def test_trace_replay_runs_on_the_simulator(workdir: Path):
    space = load_space(resolve_space("kimi-k2.6-8x-rtx-pro-6000-trace"))
    assert space.workload.kind == "trace" and space.proxy.levels == (max(space.workload.levels),)
    spec = space.render(space.start_points()[0])
    model = PerfModel.build(space.hardware, space.model, spec.argv, spec.env)
    (level,) = simulate_sweep(model, space.proxy, seed=0, noise=0.0)
    m = summarize(level)
    assert level.window and m.output_tok_s > 0
    prompts = np.array([r.prompt_tokens for r in level.records])
    assert prompts.max() > 4 * np.median(prompts)  # the trace's long-context requests are there
