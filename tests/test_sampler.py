"""The sampler on spaces a person writes: no start points, a single-stream floor, rules that
reject many combinations. The budget buys launches, not proposals."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution

from tests.test_study import make_search
from tuner import budget, effects, estimates, start_points, trial_record
from tuner.objectives import Objective
from tuner.sampler import (
    HOPELESS_PRUNES,
    POOL_ELASTICITY,
    ROOM_PRIOR,
    IncumbentLocalSampler,
    Launch,
    MemoryFraction,
    Move,
    _launch_odds,
    _mean_memory_left,
    _spread,
    confounded_values,
    hopeless_values,
    local_model,
    ranked,
)
from tuner.sim.serving import DEFAULT_NOISE
from tuner.space import DEFAULT_SPACE, Space, load_space, resolve_space

FLOOR = 60.0


def own_space(where: Path) -> Space:
    """The reference space's parameters as a person would write them for their own host:
    no ``start:`` list, 4096-token prompts, 256/512-token outputs, levels 1/64/128, peak
    throughput under a 60 tok/s single-stream floor."""
    text = resolve_space(DEFAULT_SPACE).read_text()
    text = text[: text.index("\nworkload:")] + (
        "\nworkload: {kind: burst, levels: [1, 64, 128], prompt_tokens: 4096, max_tokens: 512,"
        " single_max_tokens: 256}\n"
        f"objective: {{name: peak, min_single_stream: {FLOOR}}}\n"
    )
    path = where / "own.yaml"
    path.write_text(text.replace(f"name: {DEFAULT_SPACE}", "name: own-host"))
    return load_space(path)


def test_a_space_without_start_points_starts_at_the_engine_defaults_per_layout(workdir: Path):
    space = own_space(workdir)
    assert space.start_points() == []
    points = start_points.defaults(space, budget=40)
    layouts = [space.render(p).args.layout for p in points]
    # The engine's defaults first (TP8, one decode step, no EP), then one point per other
    # layout the rules accept and the memory plan fits; never a layout twice.
    assert layouts[0] == "TP8" and len(set(layouts)) == len(layouts)
    assert {"TP8 EP8", "PP8"} <= set(layouts)
    assert all(not space.check(p) and start_points.fits(space, p) for p in points)
    first = points[0]
    assert first["ep_size"] == 1 and first["num_continuous_decode_steps"] == 1
    assert first["nccl_proto"] is None and first["disable_cuda_graph"] is False
    assert first["mem_fraction_static"] == pytest.approx(0.87)  # the middle of 0.80..0.94
    assert len(start_points.defaults(space, budget=8)) == 2  # at most a quarter of the budget


def test_rule_rejected_proposals_use_no_budget_and_a_feasible_configuration_is_found(workdir: Path):
    space = own_space(workdir)
    search = make_search(space, 40, noise=DEFAULT_NOISE, seed=100)
    search.objective = Objective(name="peak", min_single_stream=FLOOR)
    search.run()
    trials = search.study.get_trials()
    refused = [t for t in trials if trial_record.outcome(t) == "infeasible"]
    assert budget.verdicts(trials) == 40
    # Redrawn proposals never became trials; what reached the study is nearly all launches.
    assert len(refused) <= 0.1 * len(trials), [t.user_attrs.get("reason") for t in refused]
    best = estimates.best(trials)
    assert best is not None, "no feasible configuration although TP8 meets the floor"
    assert best.floor_odds >= estimates.FLOOR_CONFIDENCE, "the unit handed out is a coin flip on the floor"
    runs = [t for t in trials if t.number in best.numbers]
    singles = [json_single(t) for t in runs]
    assert sum(singles) / len(singles) >= FLOOR


def json_single(t: optuna.trial.FrozenTrial) -> float:
    levels = trial_record.TrialRecord.of(t).attrs["levels"]
    return next(lv["output_tok_s"] for lv in levels if lv["concurrency"] == 1)


def test_stepped_moves_reach_the_end_of_the_range():
    # 0.92 + 2 * 0.01 is 0.9400000000000001 in floating point: the move must still be offered.
    sampler = IncumbentLocalSampler(seed=0)
    dist = FloatDistribution(0.80, 0.94, step=0.01)
    assert 0.94 in sampler._candidates(dist, 0.92)
    assert 0.93 in sampler._candidates(dist, 0.92) and 0.96 not in sampler._candidates(dist, 0.92)


def test_the_seed_not_floating_point_noise_orders_moves_the_model_cannot_tell_apart():
    # Two unmeasured values with the same prior: their standard deviations come out of the
    # model's covariance and differ in the last bits from process to process (figures from
    # two runs of one study that differed only in import order).
    ulps = [
        Move("nccl_min_nchannels", 8, 0.0, 0.1931609643426267),
        Move("nccl_buffsize", 2**24, 0.0, 0.1931609643426263),
    ]
    exact = [replace(m, sd=0.1931609643426265) for m in ulps]
    orders = set()
    for seed in range(16):
        first = ranked(ulps, np.random.default_rng(seed))[0].name
        assert first == ranked(exact, np.random.default_rng(seed))[0].name
        orders.add(first)
    assert orders == {"nccl_min_nchannels", "nccl_buffsize"}  # the seed decides, both ways
    # A real difference still ranks first whatever the seed.
    better = replace(ulps[1], mean=0.01)
    assert all(ranked([ulps[0], better], np.random.default_rng(seed))[0] is better for seed in range(16))


def test_a_memory_fraction_that_ran_out_of_memory_is_not_expected_to_fit_from_a_neighbour():
    # 0.95 ran out of memory from a configuration one knob away from the incumbent (another
    # NCCL protocol). Launches at 0.88-0.93 say nothing about 0.95, and 0.96 is further the
    # same way: both moves are expected to fail; a move short of the failure is not.
    dists = {
        "mem": FloatDistribution(0.80, 0.96, step=0.01),
        "proto": CategoricalDistribution(["LL", "Simple"]),
    }
    best = optuna.trial.create_trial(params={"mem": 0.93, "proto": "Simple"}, distributions=dists, value=1.0)
    launched = [Launch({"mem": m, "proto": p}, False) for m in (0.88, 0.90, 0.93) for p in ("LL", "Simple")]
    launched.append(Launch({"mem": 0.95, "proto": "LL"}, True))

    def odds(value: float) -> float:
        return _launch_odds(best, Move("mem", value, 0.0, 0.1), launched)

    assert odds(0.95) < 0.5 and odds(0.96) < 0.5
    assert odds(0.94) > 0.85  # short of the failure: nothing says it fails
    assert odds(0.90) > 0.95  # launched twice


def test_a_memory_fraction_that_ran_out_is_tried_again_from_an_incumbent_with_more_memory_left():
    # 0.94 ran out of memory from (0.92, CUDA graphs up to batch 512), which had 1.0 GiB left
    # after start-up. An incumbent with graphs up to 256 has 2.9 GiB left at 0.92: the same
    # move starts with 1.9 GiB more, so that failure says nothing about it. From an incumbent
    # with 0.1 GiB more than the failure's origin it still does, as it does for a failure
    # whose origin never reported its memory.
    dists = {
        "mem": FloatDistribution(0.80, 0.94, step=0.01),
        "graphs": CategoricalDistribution([256, 512]),
        "proto": CategoricalDistribution(["LL", "Simple"]),
    }

    def odds(incumbent: dict[str, object], launched: list[Launch]) -> float:
        best = optuna.trial.create_trial(params=incumbent, distributions=dists, value=1.0)
        room = _mean_memory_left(incumbent, launched)
        return _launch_odds(best, Move("mem", 0.94, 0.0, 0.1), launched, room)

    failure = Launch({"mem": 0.94, "graphs": 512, "proto": "LL"}, True)
    origin = Launch({"mem": 0.92, "graphs": 512, "proto": "LL"}, False, 1.0)
    roomy = {"mem": 0.92, "graphs": 256, "proto": "LL"}
    assert odds(roomy, [origin, Launch(roomy, False, 2.9), failure]) > 0.85
    assert odds(roomy, [origin, Launch(roomy, False, 1.1), failure]) < 0.5
    assert odds(roomy, [Launch(origin.params, False), Launch(roomy, False, 2.9), failure]) < 0.5
    # The incumbent's own failure of the move (another protocol) still counts.
    other = {"mem": 0.92, "graphs": 512, "proto": "Simple"}
    assert odds(other, [origin, Launch(other, False, 1.0), failure]) < 0.5


def test_while_requests_wait_for_room_the_walk_expects_more_room_to_help():
    # The incumbent's heaviest level: p99 TTFT 50 s against a median of 2 s over a 300 s level,
    # requests started only as others finished. Its memory fraction is a capacity parameter:
    # going up is expected to gain, going down to lose; NCCL's protocol is not one. Without
    # the wait, or once the memory fraction measured a trend, no such prior.
    dists = {
        "mem": FloatDistribution(0.80, 0.94, step=0.01),
        "proto": CategoricalDistribution(["LL", "Simple"]),
    }

    def incumbent(p99: float) -> optuna.trial.FrozenTrial:
        level = {
            "concurrency": 256,
            "output_tok_s": 1800.0,
            "wall_s": 300.0,
            "ttft_s_p50": 2.0,
            "ttft_s_p99": p99,
        }
        return optuna.trial.create_trial(
            params={"mem": 0.88, "proto": "LL"},
            distributions=dists,
            value=1800.0,
            user_attrs={trial_record.LEVELS: [{"concurrency": 1, "output_tok_s": 60.0}, level]},
        )

    def gains(best: optuna.trial.FrozenTrial, model: effects.Effects | None = None) -> dict[tuple, float]:
        sampler = IncumbentLocalSampler(seed=0, capacity=frozenset({"mem"}))
        return {(m.name, m.value): m.mean for m in sampler._moves(best, model)}

    waiting = gains(incumbent(p99=50.0))
    assert waiting[("mem", 0.9)] == waiting[("mem", 0.92)] == ROOM_PRIOR > 0
    assert waiting[("mem", 0.86)] == -ROOM_PRIOR and waiting[("proto", "Simple")] == 0.0
    assert set(gains(incumbent(p99=2.5)).values()) == {0.0}  # nobody waited
    # Measured at two memory fractions, flat: the knob's own trend replaces the prior.
    obs = [effects.Observation({"mem": m, "proto": "LL"}, f"m{m}", 1800.0) for m in (0.86, 0.88)]
    trend = gains(incumbent(p99=50.0), effects.fit(obs, estimates.NOISE_PRIOR, [1.0, 1.0]))
    assert abs(trend[("mem", 0.92)]) < 1e-6 and abs(trend[("mem", 0.84)]) < 1e-6
    # Which parameters are capacity parameters is the engine's word, per space.
    reference = load_space(resolve_space(DEFAULT_SPACE))
    assert reference.capacity_parameters() == {"mem_fraction_static", "max_running_requests"}
    vllm = load_space(resolve_space("vllm-deepseek-v3-8x-h200"))
    assert vllm.capacity_parameters() == {"gpu_memory_utilization", "max_num_seqs"}
    # ... as is which of them sets the memory fraction, whose steps grow the KV cache pool.
    assert reference.memory_fraction_parameter() == "mem_fraction_static"
    assert vllm.memory_fraction_parameter() == "gpu_memory_utilization"


def _launched(
    dists: dict,
    params: dict,
    value: float | None,
    *,
    pool_gib: float = 13.4,
    level: dict | None = None,
    **attrs,
) -> optuna.trial.FrozenTrial:
    """A trial as a launch stores it: its heaviest level, its server's KV cache pool."""
    user_attrs = {
        trial_record.OUTCOME: "complete" if value is not None else "failed",
        trial_record.SERVER_INFO: {"kv_cache_gib": pool_gib, "available_gpu_mem_gib": 2.0},
        trial_record.LEVELS: [level or {"concurrency": 128, "output_tok_s": 700.0, "tpot_ms_mean": 143.0}],
        **attrs,
    }
    if value is None:
        return optuna.trial.create_trial(
            params=params, distributions=dists, state=optuna.trial.TrialState.FAIL, user_attrs=user_attrs
        )
    return optuna.trial.create_trial(params=params, distributions=dists, value=value, user_attrs=user_attrs)


def test_a_larger_memory_fraction_is_expected_to_gain_what_it_adds_to_a_binding_kv_pool():
    # The incumbent's KV cache pool is 13.4 GiB per GPU on 96 GiB GPUs; at its heaviest
    # level (128 clients) 700 tok/s at 143 ms per token means 100 clients decoding at a time
    # (Little's law): the pool holds 100 requests' tokens. One step up (0.01) adds 0.96 GiB
    # (+7%), four add 28%, but no more than the 28 clients that were waiting can start.
    dists = {
        "mem": FloatDistribution(0.80, 0.94, step=0.01),
        "proto": CategoricalDistribution(["LL", "Simple"]),
    }
    memory = MemoryFraction("mem", gpu_memory_gib=96.0)
    sampler = IncumbentLocalSampler(seed=0, memory_fraction=memory)

    def gains(best: optuna.trial.FrozenTrial, model: effects.Effects | None = None) -> dict:
        return {(m.name, m.value): m for m in sampler._moves(best, model)}

    best = _launched(dists, {"mem": 0.88, "proto": "LL"}, 700.0)
    moves = gains(best)
    assert moves[("mem", 0.89)].mean == pytest.approx(POOL_ELASTICITY * math.log(1 + 0.96 / 13.4), rel=1e-3)
    assert moves[("mem", 0.92)].mean == pytest.approx(POOL_ELASTICITY * math.log(128 / 100.1), rel=1e-2)
    assert moves[("mem", 0.87)].mean == 0.0 and moves[("proto", "Simple")].mean == 0.0
    # Every client decoding at once: the pool does not bind, and room gains nothing.
    idle = _launched(
        dists,
        {"mem": 0.88, "proto": "LL"},
        700.0,
        level={"concurrency": 64, "output_tok_s": 700.0, "tpot_ms_mean": 91.4},
    )
    assert gains(idle)[("mem", 0.90)].mean == pytest.approx(0.0, abs=1e-3)
    # A server that did not say its pool: no such prior.
    silent = _launched(dists, {"mem": 0.88, "proto": "LL"}, 700.0, pool_gib=0.0)
    assert gains(silent)[("mem", 0.90)].mean == 0.0

    # One launch at 0.89, unlucky against a lucky incumbent, measured a loss: read against
    # the pool's physics, the move is still expected to gain, with less uncertainty than
    # either alone.
    trials = [best, _launched(dists, {"mem": 0.89, "proto": "LL"}, 686.0)]
    model = local_model(best, trials, estimates.NOISE_PRIOR)
    assert model is not None and model.gain("mem", 0.88, 0.89)[0] < 0
    measured = gains(best, model)[("mem", 0.89)]
    assert 0 < measured.mean < moves[("mem", 0.89)].mean
    assert measured.sd < model.gain("mem", 0.88, 0.89)[1]


def test_a_change_that_ran_out_of_memory_is_tried_again_with_the_memory_fraction_a_step_down():
    # From the incumbent (memory fraction 0.94, 16 MiB NCCL buffers), 8 NCCL channels ran out
    # of memory at start-up. The walk offers it again with 0.93, expected to launch (the step
    # frees 0.96 GiB the failed launch did not have) and to gain what 8 channels and the step
    # down are expected to; a failure that was no memory failure (a crash) is not offered so.
    dists = {
        "mem": FloatDistribution(0.80, 0.94, step=0.01),
        "channels": CategoricalDistribution([None, 8]),
        "proto": CategoricalDistribution(["LL", "Simple"]),
    }
    best = _launched(dists, {"mem": 0.94, "channels": None, "proto": "LL"}, 1900.0)
    trials = [best, _launched(dists, {"mem": 0.93, "channels": None, "proto": "LL"}, 1880.0)]

    def plan(failure_class: str) -> dict | None:
        failed = _launched(
            dists,
            {"mem": 0.94, "channels": 8, "proto": "LL"},
            None,
            **{trial_record.FAILURE_CLASS: failure_class},
        )
        done = [*trials, failed, _launched(dists, {"mem": 0.94, "channels": None, "proto": "Simple"}, 1500.0)]
        sampler = IncumbentLocalSampler(seed=0, memory_fraction=MemoryFraction("mem", gpu_memory_gib=96.0))
        model = local_model(best, done, estimates.NOISE_PRIOR)
        seen = {sampler._key(t.params) for t in done}
        local = sampler._local_plan(best, model, seen, done)
        return None if local is None else local[0]

    assert plan("oom") == {"mem": 0.93, "channels": 8, "proto": "LL"}
    assert plan("crash") != {"mem": 0.93, "channels": 8, "proto": "LL"}
    # Without a memory-fraction parameter the space has nothing to step down.
    sampler = IncumbentLocalSampler(seed=0)
    assert sampler._room_making(best, None, None, trials) == []


def test_a_change_the_rules_reject_alone_is_made_with_the_second_change_that_allows_it():
    # NCCL's minimum of channels may not exceed its maximum. The incumbent caps channels at
    # 16; a launch with a 32-channel minimum (and a 64 cap) gained 27%. Alone, a 32 minimum
    # from the incumbent is rejected, so single changes never reach it: the walk makes it
    # with the cap raised to 32 (the 64 cap with it was measured already).
    dists = {
        "lo": CategoricalDistribution([None, 32]),
        "hi": CategoricalDistribution([16, 32, 64]),
        "proto": CategoricalDistribution(["LL", "Simple"]),
    }

    def identity(params: dict) -> str | None:
        if params.get("lo") is not None and params["lo"] > params["hi"]:
            return None
        return repr(sorted(params.items()))

    best = {"lo": None, "hi": 16, "proto": "LL"}
    done = [
        _launched(dists, best, 1500.0),
        _launched(dists, best, 1510.0),
        _launched(dists, {**best, "proto": "Simple"}, 1200.0),
        _launched(dists, {**best, "lo": 32, "hi": 64}, 1900.0),
    ]
    sampler = IncumbentLocalSampler(seed=0, identity=identity)
    model = local_model(done[0], done, estimates.NOISE_PRIOR)
    seen = {identity(t.params) for t in done}
    local = sampler._local_plan(done[0], model, seen, done)
    assert local is not None and local[0] == {"lo": 32, "hi": 32, "proto": "LL"}
    # Nothing makes a rejected change valid when no other value allows it.
    strict = IncumbentLocalSampler(seed=0, identity=lambda p: None if p.get("lo") else identity(p))
    lo = next(m for m in strict._moves(done[0], model) if m.name == "lo")
    assert strict._repair(done[0], model, None, lo, seen) is None


def test_a_knob_measured_only_far_from_the_incumbent_is_uncertain_not_flat():
    # "m" was launched at four values, each in a configuration far from the incumbent (its
    # launches weigh 1/256); "a" at four values, many times, near it, all measured alike.
    # A walk must still expect "m" to matter: its effects are shrunk towards 0 because they
    # are unknown here, which is no evidence that the knob is flat.
    obs, weights = [], []
    for i in range(8):
        for a in (0, 1, 2, 3):
            obs.append(effects.Observation({"a": a, "m": 0}, f"a{a}-{i}", 100.0 * (1 + 0.01 * (i % 3 - 1))))
            weights.append(1.0)
    for m, value in ((1, 90.0), (2, 100.0), (3, 110.0), (4, 95.0)):
        obs.append(effects.Observation({"a": 0, "m": m}, f"m{m}", value))
        weights.append(1 / 256)
    model = effects.fit(obs, estimates.NOISE_PRIOR, weights)
    assert _spread(model, "m") > 0.5 * effects.EFFECT_PRIOR
    assert _spread(model, "a") < 0.5 * _spread(model, "m")


@pytest.mark.parametrize("off", [False, None], ids=["off-is-false", "off-is-the-default-null"])
def test_a_move_that_switches_a_parameter_off_takes_its_effect_along(off):
    # EPLB exists only with expert parallelism (ep 4); with it on, a launch loses 70%. The
    # incumbent is EP4 without EPLB (100 tok/s); EP1 measured 90. In an additive model the
    # good "EPLB off" shares EP4's credit, so EP1's own effect alone looks better than EP4's:
    # the move to EP1 must be expected to lose what it measured, not to gain. The same when
    # the good value is null (the engine's default, as a CUDA-graph batch limit's), which a
    # configuration sets, unlike one where the parameter does not apply.
    dists = {
        "ep": CategoricalDistribution([1, 4]),
        "eplb": CategoricalDistribution([off, True]),
        "proto": CategoricalDistribution(["LL", "Simple"]),
    }

    def applies(params: dict) -> dict:
        return {k: v for k, v in params.items() if k != "eplb" or params.get("ep") == 4}

    launches = [({"ep": 1}, 90.0), ({"ep": 4, "eplb": off}, 100.0), ({"ep": 4, "eplb": True}, 30.0)]
    trials = []
    for params, value in launches:
        for proto in ("LL", "Simple"):
            full = {**params, "proto": proto}
            trials.append(
                optuna.trial.create_trial(
                    params=full,
                    distributions={k: dists[k] for k in full},
                    value=value,
                    user_attrs={trial_record.OUTCOME: "complete"},
                )
            )
    best = trials[3]  # EP4, EPLB off, Simple
    model = local_model(best, trials, estimates.NOISE_PRIOR)
    sampler = IncumbentLocalSampler(seed=0, complete=applies)
    to_ep1 = next(m for m in sampler._moves(best, model) if m.name == "ep")
    assert to_ep1.mean == pytest.approx(-0.105, abs=0.03)  # log(90 / 100)


def test_a_good_value_measured_only_beside_a_bad_one_is_still_worth_a_launch():
    # Three start points set NCCL_PROTO=LL (x0.44 on this workload) together with 8 channels
    # (x1.45), at three expert-parallel sizes; the incumbent runs Simple with the default
    # channels. The additive model splits the bundle's loss between LL and 8 channels, so
    # without the rule a move to 8 channels is expected to lose and is ranked below every
    # untried change. It is no loss anyone measured: the move keeps its uncertainty only.
    dists = {
        "proto": CategoricalDistribution(["LL", "Simple"]),
        "channels": CategoricalDistribution([None, 8]),
        "ep": CategoricalDistribution([1, 4, 8]),
    }

    def launch(value: float, **params) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            params=params, distributions=dists, value=value, user_attrs={trial_record.OUTCOME: "complete"}
        )

    trials = [launch(100.0 * 0.44 * 1.45, proto="LL", channels=8, ep=ep) for ep in (1, 4, 8)]
    trials += [launch(100.0, proto="Simple", channels=None, ep=ep) for ep in (1, 4, 8)]
    best = trials[-1]
    model = local_model(best, trials, estimates.NOISE_PRIOR)
    assert model is not None and model.gain("channels", None, 8)[0] < -0.1  # the model's split
    assert {("proto", "'LL'"), ("channels", "8")} <= confounded_values(trials)

    sampler = IncumbentLocalSampler(seed=0)
    sampler._confounded = confounded_values(trials)
    to_eight = next(m for m in sampler._moves(best, model) if m.name == "channels")
    assert to_eight.mean == 0.0 and to_eight.sd > estimates.NOISE_PRIOR

    # Measured apart, it is no longer the model's guess; nor are the values of one TPE
    # proposal, which a second launch has not bundled yet.
    apart = [*trials, launch(145.0, proto="Simple", channels=8, ep=8)]
    assert ("channels", "8") not in confounded_values(apart)
    one = [*trials[3:], launch(50.0, proto="LL", channels=8, ep=1)]
    assert ("channels", "8") not in confounded_values(one)


def test_a_value_every_launch_of_which_was_pruned_is_not_proposed_again():
    # "eplb" True prunes every launch whatever else it sets. A TPE proposal changes several
    # values at once, so one pruned launch does not condemn a value; after two pruned
    # launches with it and none that ran, no proposal sets it again.
    dists = {
        "eplb": CategoricalDistribution([False, True]),
        **{f"k{i}": CategoricalDistribution([0, 1, 2]) for i in range(4)},
    }
    sampler = IncumbentLocalSampler(
        seed=3, local_share=0.0, identity=lambda p: repr(sorted(p.items())), distributions=dists
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        p = {name: trial.suggest_categorical(name, d.choices) for name, d in dists.items()}
        if p["eplb"]:
            raise optuna.TrialPruned()
        trial.set_user_attr(trial_record.OUTCOME, "complete")
        return 100.0 + sum(p[f"k{i}"] for i in range(4))

    study.optimize(objective, n_trials=30)
    crippled = [t for t in study.trials if t.params["eplb"]]
    # One more while the pruned launches share another value with EPLB (see the next test).
    assert HOPELESS_PRUNES <= len(crippled) <= HOPELESS_PRUNES + 1
    assert len(study.trials) == 30


def test_pruned_proposals_condemn_the_value_that_explains_them_not_every_value_they_share():
    # Two pruned TPE proposals both set EPLB and a 4 MiB NCCL buffer: either may be to blame,
    # so neither is condemned yet (the buffer may be the best value of its knob). A third
    # pruned launch with EPLB and another buffer tells them apart: EPLB explains all three.
    dists = {
        "eplb": CategoricalDistribution([False, True]),
        "buffsize": CategoricalDistribution([None, 4194304, 16777216]),
        "k": CategoricalDistribution([0, 1, 2]),
    }

    def pruned(**params) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            state=optuna.trial.TrialState.PRUNED, params=params, distributions={n: dists[n] for n in params}
        )

    two = [pruned(eplb=True, buffsize=4194304, k=0), pruned(eplb=True, buffsize=4194304, k=1)]
    assert hopeless_values(two) == set()
    three = [*two, pruned(eplb=True, buffsize=16777216, k=1)]
    assert hopeless_values(three) == {("eplb", "True")}


def test_a_value_whose_pruned_launches_other_values_explain_is_not_condemned():
    # Two pruned TPE proposals set an fp8 KV cache, one with a 4096-token prefill chunk and
    # one with 2048; walk moves alone to a 2048 chunk and to a request cap of 128 were pruned
    # too, and a proposal with the 4096 chunk and that cap. The chunk of 2048 and the cap
    # explain launches nothing else explains; the fp8 cache (the best value of its knob on a
    # goodput space) only shares launches the chunks explain as well, so it stays a
    # candidate, as does the 4096 chunk, whose launches the cap and the cache explain.
    dists = {
        "kv": CategoricalDistribution(["auto", "fp8"]),
        "chunk": CategoricalDistribution([None, 2048, 4096]),
        "cap": CategoricalDistribution([None, 128]),
    }

    def trial(state: optuna.trial.TrialState, **params) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            state=state,
            params=params,
            distributions=dists,
            value=100.0 if state == optuna.trial.TrialState.COMPLETE else None,
            user_attrs={trial_record.OUTCOME: "complete"}
            if state == optuna.trial.TrialState.COMPLETE
            else {},
        )

    pruned = optuna.trial.TrialState.PRUNED
    done = [
        trial(optuna.trial.TrialState.COMPLETE, kv="auto", chunk=None, cap=None),
        trial(pruned, kv="fp8", chunk=4096, cap=None),
        trial(pruned, kv="fp8", chunk=2048, cap=None),
        trial(pruned, kv="auto", chunk=4096, cap=128),
        trial(pruned, kv="auto", chunk=2048, cap=None),
        trial(pruned, kv="auto", chunk=None, cap=128),
    ]
    assert hopeless_values(done) == {("chunk", "2048"), ("cap", "128")}


def closeness_to(floor: float) -> Callable[[optuna.trial.FrozenTrial], float | None]:
    """How close a trial came to a single-stream ``floor`` (>= 1: met), as ``tuner search``
    tells the sampler (tuner.objectives.Objective.feasibility)."""

    def closeness(t: optuna.trial.FrozenTrial) -> float | None:
        c = t.constraints.get("min_single_stream")
        return None if c is None else 1.0 - c / floor

    return closeness


def floor_study(seed: int, walk_to_floor: bool) -> optuna.Study:
    """Three knobs that each add single-stream speed and cost throughput (a smaller batch,
    fewer experts per GPU...) and six that do nothing; the floor needs all three near their
    top, and the start point has none. ``walk_to_floor``: the sampler is told how close each
    launch came to the floor, as ``tuner search`` tells it."""
    from optuna.distributions import CategoricalDistribution

    floor = 80.0
    space = {
        **{k: CategoricalDistribution([0, 1, 2, 3]) for k in "abc"},
        **{f"k{i}": CategoricalDistribution([0, 1, 2]) for i in range(6)},
    }

    study = optuna.create_study(
        direction="maximize",
        sampler=IncumbentLocalSampler(
            seed=seed,
            local_after=1,
            local_share=1.0,
            feasibility=closeness_to(floor) if walk_to_floor else None,
        ),
    )
    study.enqueue_trial({name: 0 for name in space})

    def objective(trial: optuna.Trial) -> float:
        p = {name: trial.suggest_categorical(name, d.choices) for name, d in space.items()}
        steps = p["a"] + p["b"] + p["c"]
        trial.set_constraint("min_single_stream", floor - (35.0 + 6.0 * steps))
        return 1000.0 - 40.0 * steps

    study.optimize(objective, n_trials=16)
    return study


def expert_parallel_floor_study(seed: int, floor_odds: bool) -> optuna.Study:
    """Expert parallelism (any ``ep`` above 1) gains 15% at peak and costs 20% of the
    single-stream rate, which takes it below the floor from every configuration; five other
    knobs gain 3% a step and leave the single-stream rate alone, so the incumbent keeps
    moving. ``floor_odds``: the sampler is told how close each launch came to the floor,
    as ``tuner search`` tells it."""
    floor = 60.0
    space = {
        "ep": CategoricalDistribution([1, 2, 4, 8]),
        **{f"k{i}": CategoricalDistribution([0, 1, 2, 3]) for i in range(5)},
    }

    sampler = IncumbentLocalSampler(
        seed=seed, local_after=1, local_share=1.0, feasibility=closeness_to(floor) if floor_odds else None
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial({name: d.choices[0] for name, d in space.items()})

    def objective(trial: optuna.Trial) -> float:
        p = {name: trial.suggest_categorical(name, d.choices) for name, d in space.items()}
        expert_parallel = p["ep"] > 1
        trial.set_constraint("min_single_stream", floor - 70.0 * (0.8 if expert_parallel else 1.0))
        trial.set_user_attr(trial_record.OUTCOME, "complete")
        return 1000.0 * (1.15 if expert_parallel else 1.0) * 1.03 ** sum(p[f"k{i}"] for i in range(5))

    study.optimize(objective, n_trials=24)
    return study


def test_a_change_measured_below_the_floor_is_not_tried_again_from_each_new_incumbent():
    # Without the odds of meeting the floor, EP2's measured 15% gain makes it the best move
    # again after every change of incumbent, and each of those launches misses the floor
    # (14-17 of 24 trials). With them, each EP value is launched about once.
    def below_floor(study: optuna.Study) -> int:
        return sum(1 for t in study.trials if max(t.constraints.values()) > 0)

    with_odds = [below_floor(expert_parallel_floor_study(seed, floor_odds=True)) for seed in range(3)]
    without = [below_floor(expert_parallel_floor_study(seed, floor_odds=False)) for seed in range(3)]
    assert max(with_odds) <= 6, with_odds  # three EP values, a retry or two while unsure
    assert sum(without) > 2 * sum(with_odds), (with_odds, without)


def test_a_study_with_no_feasible_configuration_walks_towards_the_floor():
    # The start point is far below the floor (35 of 80 tok/s) and the objective pulls the
    # other way. Without feasible trials there is no incumbent to walk from; the walk starts
    # from the launch closest to the floor instead and ranks its moves by how much closer
    # the study expects them to bring it (partial credit for a near miss).
    def reached(study: optuna.Study) -> bool:
        return any(t.constraints and max(t.constraints.values()) <= 0 for t in study.trials)

    walked = [reached(floor_study(seed, walk_to_floor=True)) for seed in range(6)]
    blind = [reached(floor_study(seed, walk_to_floor=False)) for seed in range(6)]
    assert sum(walked) >= 5, walked
    assert sum(walked) > sum(blind), (walked, blind)  # the walk, not luck, reaches the floor


def test_a_stepped_memory_fraction_is_proposed_as_the_value_the_space_lists():
    # TPE draws a stepped float as low + k * step: 0.8 + 6 * 0.01 is 0.8600000000000001. The
    # walk's model tells values apart by repr, so such a value would split one memory
    # fraction's launches in two; every proposal carries the grid's value instead.
    dists = {
        "mem": FloatDistribution(0.8, 0.95, step=0.01),
        "k": CategoricalDistribution([0, 1, 2]),
    }
    sampler = IncumbentLocalSampler(
        seed=0, local_share=0.0, identity=lambda p: repr(sorted(p.items())), distributions=dists
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        mem = trial.suggest_float("mem", 0.8, 0.95, step=0.01)
        k = trial.suggest_categorical("k", [0, 1, 2])
        trial.set_user_attr(trial_record.OUTCOME, "complete")
        return 100.0 * mem + k

    study.optimize(objective, n_trials=25)
    fractions = [t.params["mem"] for t in study.trials]
    assert all(repr(v) == repr(round(v, 2)) for v in fractions), fractions
