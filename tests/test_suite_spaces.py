"""The benchmark suite's spaces (benchmarks/spaces/, benchmarks/suite.py): each loads like
any space a person writes, its start points render to a launch, the fixed split names every
space once, and every stored best is a configuration the simulator launches."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import suite  # noqa: E402
from _common import SUITE_SPACES, best_path, launchable, share_interval, share_text, space_named  # noqa: E402

from tuner.space import load_space, resolve_space  # noqa: E402

SUITE_FILES = sorted(SUITE_SPACES.glob("*.yaml"))


def _file(name: str) -> Path:
    own = SUITE_SPACES / f"{name}.yaml"
    return own if own.is_file() else resolve_space(name)


def test_the_split_names_every_space_once() -> None:
    names = [*suite.TUNE, *suite.JUDGED]
    assert len(names) == len(set(names)), "a space is in both halves, or twice in one"
    own = {p.stem for p in SUITE_FILES}
    assert own <= set(names), f"suite spaces outside the split: {sorted(own - set(names))}"
    assert set(names) - own == {"kimi-k2.6-8x-rtx-pro-6000", "kimi-k2.6-8x-rtx-pro-6000-trace"}
    assert len(names) >= 8
    split_doc = (SUITE_SPACES / "SPLIT.md").read_text()
    for name in suite.TUNE:
        assert f"`{name}`" in split_doc.split("## JUDGED")[0]
    for name in suite.JUDGED:
        assert f"`{name}`" in split_doc.split("## JUDGED")[1]


@pytest.mark.parametrize("name", [*suite.TUNE, *suite.JUDGED])
def test_space_loads_with_the_tuners_loader_and_renders_its_start_points(name: str) -> None:
    path = _file(name)
    space = load_space(path)
    assert space.name == name
    assert path.read_text().startswith("#"), "each space file opens with a comment saying what it is"
    assert 6 <= len(space.distributions()) <= 20
    for point in space.start_points():
        spec = space.render(point)
        assert spec.argv[:3] == ["python3", "-m", "sglang.launch_server"]
        assert not space.check(point), f"start point refused by the rules: {point}"
        assert launchable(space, point), f"start point does not launch in the simulator: {point}"


def test_the_issues_spaces_are_as_described() -> None:
    goodput = space_named("deepseek-v3-8x-h200-goodput")
    assert (goodput.model, goodput.hardware) == ("deepseek-v3", "h200-sxm-x8")
    assert goodput.objective.name == "goodput"
    assert (goodput.objective.ttft_s, goodput.objective.tpot_ms) == (10, 60)
    assert goodput.workload.levels == (1, 64, 256)
    assert (goodput.workload.prompt_tokens, goodput.workload.max_tokens) == (2048, 512)
    assert {"tp8_dpattn8", "tp4pp2"} <= set(goodput.value_lists()["layout"])

    floor = space_named("kimi-k2.6-8x-rtx-pro-6000-floor")
    reference = space_named("kimi-k2.6-8x-rtx-pro-6000")
    assert floor.value_lists() == reference.value_lists()
    assert floor.start_points() == []
    assert floor.objective.name == "peak" and floor.objective.min_single_stream == 60
    assert floor.workload.levels == (1, 64, 128)
    assert (floor.workload.prompt_tokens, floor.workload.single_max_tokens, floor.workload.max_tokens) == (
        4096,
        256,
        512,
    )
    without_start = [n for n in suite.SPACES if not space_named(n).start_points()]
    assert len(without_start) >= 3


@pytest.mark.parametrize("name", [*suite.TUNE, *suite.JUDGED])
def test_stored_best_exists_and_launches(name: str) -> None:
    path = best_path(name, suite=True)
    assert path.is_file(), f"run `python benchmarks/space_best.py --space {name} --suite`"
    best = json.loads(path.read_text())
    space = space_named(name)
    assert best["space"] == name and best["value"] > 0
    params = space.complete(best["params"])
    assert not space.check(params)
    assert launchable(space, params)


def test_a_study_is_scored_when_its_budget_is_used_up_not_after_as_many_proposals() -> None:
    """A proposal the rules reject costs no budget (tuner/budget.py), so a strategy that
    proposes many (random search) runs more trials than its budget: the benchmarks take its
    recommendation, its trials to 2% and its server time at the trial that used the budget
    up, not at the budget-th trial."""
    from studies import Job, StudyResult

    study = StudyResult(
        Job("random", 0, 3),
        rec_value=[10.0, 10.0, 50.0, 50.0, 90.0, 90.0],
        server_s=[3600.0, 0.0, 3600.0, 0.0, 3600.0, 3600.0],
        verdict=[True, False, True, False, True, True],
    )
    assert study.trials_within(3) == 5
    assert study.final(3) == 90.0 and study.final(2) == 50.0
    assert study.launches_to(90.0, 3) == 3 and study.launches_to(90.0, 2) is None
    assert study.trials_to(90.0, 3) == 5
    assert study.server_h(3) == 3.0 and study.server_h() == 4.0
    # Results stored without verdicts count every trial.
    old = StudyResult(Job("random", 0, 3), rec_value=[10.0, 50.0, 90.0, 90.0], server_s=[0.0] * 4)
    assert old.final(2) == 50.0


def test_a_share_of_seeds_is_reported_with_its_binomial_interval() -> None:
    """20 seeds cannot tell 40% from 70% (the same studies on two machines' BLAS kernels gave
    both): the suite's and search_efficiency's targets print the Wilson 95% interval."""
    lo, hi = share_interval(8, 20)
    assert (round(lo, 3), round(hi, 3)) == (0.219, 0.613)  # Wilson score interval, z = 1.96
    assert share_interval(20, 20)[1] == 1.0 and share_interval(0, 20)[0] == 0.0
    assert share_text(0.7, 20) == "70% (14/20; 95% interval 48%-85%)"
    rows = {
        "kimi-k2.6-8x-rtx-pro-6000": {
            "tuner": {
                "within_2": 0.4,
                "seeds": 20,
                "median_trials_to_2": None,
                "rejected_share": 0.0,
                "sampler_ms": 20.0,
            }
        }
    }
    per_space = {k: {"rows": v, "floor": None, "start_points": True} for k, v in rows.items()}
    reference = [t for t in suite.targets(per_space, 40) if t["target"].startswith("reference space")]
    assert reference and reference[0]["figures"] == "40% (8/20; 95% interval 22%-61%)"


def test_a_launch_above_the_stored_best_is_reported_as_a_stale_best() -> None:
    """A share above 100% means the stored best is not the space's best, and every share of
    that space is measured against too low a bar: the suite says so and how to fix it."""
    from studies import Job, StudyResult

    def study(seed: int, top: float) -> StudyResult:
        return StudyResult(
            Job("tuner", seed, 2, space="s"),
            rec_value=[top, top],
            server_s=[0.0, 0.0],
            trial_value=[top * 0.9, top],
            verdict=[True, True],
        )

    entry = {"best": 100.0, "rows": {"tuner": suite.score([study(0, 99.0), study(1, 100.0)], 100.0, 2)}}
    assert suite._best_note("s", entry) == []
    entry["rows"]["random"] = suite.score([study(3, 103.0), study(4, 101.0)], 100.0, 2)
    (note,) = suite._best_note("s", entry)
    assert "random seed 3" in note and "103.0%" in note and "space_best.py --space s --start" in note


def test_space_best_start_configurations_are_checked_before_any_search() -> None:
    """``space_best.py --start`` takes a configuration a study found: a typo or one the rules
    reject stops it at once, naming what is wrong."""
    import space_best

    space = space_named("kimi-k2.6-8x-rtx-pro-6000-floor")
    config = space_best._configuration(space, '{"layout": "tp4pp2", "mem_fraction_static": 0.9}')
    assert config["layout"] == "tp4pp2" and config == space.complete(config)
    for text, said in [
        ("{layout: tp8}", "not JSON"),
        ("[1, 2]", "a JSON object"),
        ('{"layuot": "tp8"}', "no parameter layuot"),
        ('{"layout": "tp3"}', "layout"),
        ('{"nccl_min_nchannels": 16, "nccl_max_nchannels": 8}', "the rules reject it"),
    ]:
        with pytest.raises(SystemExit, match=said):
            space_best._configuration(space, text)


def test_the_gp_peer_reads_one_worst_constraint_per_trial_under_either_optuna_signature() -> None:
    """The GP peer's constraint reader replaces Optuna's, whose arguments changed between
    5.0 ``(study, trials)`` and 5.1 ``(trials)``: both must give one column, the worst."""
    import optuna
    from optuna.distributions import FloatDistribution

    from studies import _worst_constraint

    def trial(constraints: dict[str, float]) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            params={"x": 0.5},
            distributions={"x": FloatDistribution(0, 1)},
            value=1.0,
            system_attrs={"constraints": list(constraints.values())},
        )

    trials = [trial({"a": -1.0, "b": 2.0}), trial({})]
    for args in ((trials,), (None, trials)):
        vals, feasible = _worst_constraint(*args)
        assert vals.shape == (2, 1)
        assert list(vals[:, 0]) == [2.0, 0.0] and list(feasible) == [False, True]


def test_two_suite_runs_are_compared_seed_by_seed(tmp_path: Path) -> None:
    """A sampler change is judged by the difference seed by seed (the same start points and
    request draws), not by two counts: seeds only one run has are left out, each split is
    pooled over its spaces, and a run stored without seed ids is refused with exit 2."""
    import suite_compare

    def row(seeds: list[int], shares: list[float], hours: list[float]) -> dict:
        return {"seed_ids": seeds, "shares": shares, "server_h": hours}

    def run(rows: dict[str, tuple[str, dict]]) -> dict:
        spaces = {name: {"split": split, "rows": {"tuner": r}} for name, (split, r) in rows.items()}
        return {"budget": 40, "spaces": spaces}

    before = run(
        {
            "a": ("TUNE", row([0, 1, 2, 3], [0.97, 0.99, 1.00, 0.90], [5.0, 5.0, 5.0, 5.0])),
            "b": ("JUDGED", row([0, 1], [0.80, 0.85], [3.0, 3.0])),
        }
    )
    after = run(
        {
            "a": ("TUNE", row([1, 2, 3, 4], [0.99, 0.99, 0.94, 0.50], [4.0, 5.0, 5.5, 9.0])),
            "b": ("JUDGED", row([0, 1], [0.82, 0.89], [3.0, 3.0])),
        }
    )
    rows = {name: p for name, _, p in suite_compare.compare(before, after, "tuner")}
    a = rows["a"]  # seeds 1-3 in both: +0, -0.01, +0.04; seed 0 and 4 in one run only
    assert a.seeds == 3 and (a.within_2_before, a.within_2_after) == (2, 2)
    assert a.mean_diff == pytest.approx(0.01)
    assert a.se == pytest.approx(((0.01**2 + 0.02**2 + 0.03**2) / 2) ** 0.5 / 3**0.5)
    assert (a.higher, a.lower, a.same) == (1, 1, 1)
    assert a.server_h_diff == pytest.approx((-1.0 + 0.0 + 0.5) / 3)
    # A split pools its spaces' seeds; seed 0 of "b" is not seed 0 of "a".
    assert rows["all JUDGED spaces"].seeds == 2 and rows["all JUDGED spaces"].mean_diff == pytest.approx(0.03)
    assert rows["all TUNE spaces"].seeds == 3

    old = tmp_path / "old.json"
    del before["spaces"]["a"]["rows"]["tuner"]["seed_ids"]
    old.write_text(json.dumps(before))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(after))
    assert suite_compare.main([str(old), str(new)]) == 2
    assert suite_compare.main([str(tmp_path / "missing.json"), str(new)]) == 2


def test_trials_are_sorted_by_why_they_ran_and_what_they_did_to_the_recommendation() -> None:
    """benchmarks/final_window.py: a real study's start points and the final window's
    confirmation are told apart from the walk's new configurations, each trial carries the
    recommendation's share after it, and a miss is split into never launched / launched."""
    import final_window

    study = final_window.study_trials("kimi-k2.6-8x-rtx-pro-6000", 0, 10)
    kinds = [t["kind"] for t in study["trials"]]
    assert set(kinds) <= set(final_window.KINDS)
    assert kinds[:5] == ["start point"] * 5  # the reference space's five start points
    # Budget 10 leaves a final window of one trial: its leader, screened on the proxy only so
    # far, is measured on the target before anything is recommended.
    last = study["trials"][-1]
    assert last["kind"] == "confirmation" and last["launches"] >= 2

    def made(seed: int, trials: list[tuple[str, float, float]], of_rec: tuple[int, ...] = ()) -> dict:
        """A study: (kind, the trial's share of the best, the recommendation's share after it)
        per trial; the last one's configuration was launched twice; the trials numbered in
        ``of_rec`` launched the configuration recommended before them."""
        rows = [
            {"number": i, "kind": k, "server_s": 3600.0, "launched": True, "share": share, "rec_share": rec,
             "launches": 2 if i == len(trials) - 1 else 1, "of_the_recommendation": i in of_rec}
            for i, (k, share, rec) in enumerate(trials)
        ]  # fmt: skip
        return {"seed": seed, "trials": rows}

    new = "new (walk or TPE)"
    found = final_window.analyse(
        [
            # Reached the best and recommended it after its confirmation.
            made(0, [("start point", 0.9, 0.9), (new, 1.0, 0.9), ("confirmation", 1.0, 1.0)]),
            # Launched the best once and recommended another.
            made(1, [("start point", 0.9, 0.9), (new, 0.99, 0.9), ("re-measurement", 0.95, 0.95)]),
            # Never got there.
            made(2, [("start point", 0.8, 0.8), (new, 0.85, 0.85), ("confirmation", 0.85, 0.85)]),
        ]
    )
    assert found["within_2"] == 1
    assert (found["missed_never_launched"], found["missed_launched"], found["missed_launched_once"]) == (
        1,
        1,
        1,
    )
    confirmation = found["kinds"]["confirmation"]
    assert confirmation["trials_per_study"] == pytest.approx(2 / 3)
    assert (confirmation["raised"], confirmation["lowered"]) == (1, 0)
    assert confirmation["mean_change_points"] == pytest.approx(100 * (0.1 + 0.0) / 2)
    assert found["kinds"]["re-measurement"]["raised"] == 1
    assert found["kinds"][new]["raised"] == 1  # 0.8 -> 0.85 in seed 2
    assert found["kinds"]["start point"]["server_h_per_study"] == pytest.approx(1.0)

    # A plateau: re-measuring a challenger tied with the leader (97.7% against 97.8%) cannot
    # move the recommendation's worth; re-measuring the leader itself, or launching the best,
    # can.
    plateau = made(
        3,
        [("start point", 0.978, 0.978), (new, 1.0, 0.978), ("re-measurement", 0.977, 0.978),
         ("re-measurement", 0.978, 0.978)],
        of_rec=(3,),
    )  # fmt: skip
    tied = final_window.analyse([plateau])["kinds"]
    assert (tied["re-measurement"]["tied_per_study"], tied[new]["tied_per_study"]) == (1, 0)


def test_the_noise_ceiling_replays_ideal_studies_from_measured_launches() -> None:
    """benchmarks/noise_ceiling.py: the contenders of the reference space's best are the best
    and its one-parameter neighbours within the band, best first; an ideal study recommends
    a hit whenever hits measure above misses, and a coin toss's worth when they measure the
    same."""
    import noise_ceiling
    import numpy as np
    from _common import load_best

    space = space_named("kimi-k2.6-8x-rtx-pro-6000")
    best = space.complete(load_best("kimi-k2.6-8x-rtx-pro-6000", suite=True)["params"])
    found = noise_ceiling.contenders(space, best)
    assert space.key(found[0][0]) == space.key(best) and found[0][1] == 1.0
    shares = [share for _, share in found]
    assert shares == sorted(shares, reverse=True) and min(shares) >= noise_ceiling.CONTENDER_BAND
    assert len(found) > 1 and len({space.key(p) for p, _ in found}) == len(found)
    # One parameter moved (and what it switches on or off: a backend's mode).
    for params, _ in found[1:]:
        moved = {k for k in set(params) | set(best) if repr(params.get(k)) != repr(best.get(k))}
        assert 1 <= len(moved) <= 2, moved

    rng = np.random.default_rng(0)
    hits = np.array([True, False])
    apart = np.array([[100.0, 101, 99, 100, 102, 98, 100], [90.0, 91, 89, 90, 92, 88, 90]])
    assert noise_ceiling.equal_allocation(apart, hits, 1, 300, rng) == 1.0
    assert noise_ceiling.sequential(apart, hits, 5, 100, rng, by_upper=False) == 1.0
    assert noise_ceiling.sequential(apart, hits, 5, 100, rng, by_upper=True) == 1.0
    # The miss measures like the hit (a hair above, so that no draw ties): one launch each
    # picks the hit in about half the draws, and more launches cannot tell them apart either.
    same = np.array(
        [[100.0, 104, 96, 101, 103, 97, 99], [100.01, 104.01, 96.01, 101.01, 103.01, 97.01, 99.01]]
    )
    once = noise_ceiling.equal_allocation(same, hits, 1, 2000, rng)
    assert 0.3 < once < 0.6
    assert noise_ceiling.equal_allocation(same, hits, 4, 2000, rng) < 0.6
    # The order of the rows does not matter: the hit is found by its flag, not its place.
    assert noise_ceiling.equal_allocation(apart[::-1], hits[::-1], 1, 300, rng) == 1.0


def test_the_request_sets_benchmark_scores_the_mean_of_draws_no_study_measures_on() -> None:
    """benchmarks/request_sets.py: a configuration's expected value is the mean of its
    noise-free values on the request sets from FIRST_REQUEST_SEED, which differ where replies
    end on their own (the reference target), so it is not the truth's one draw; one that
    does not launch scores 0 on every scoring."""
    import request_sets
    from _common import load_best, objective_value, space_objective
    from space_best import true_value

    from tuner.sim.model import PerfModel
    from tuner.sim.serving import simulate_sweep

    space = space_named("kimi-k2.6-8x-rtx-pro-6000")
    best = space.complete(load_best("kimi-k2.6-8x-rtx-pro-6000", suite=True)["params"])
    spec = space.render(best)
    model = PerfModel.build(space.hardware, space.model, spec.argv, spec.env)
    seeds = range(
        request_sets.FIRST_REQUEST_SEED, request_sets.FIRST_REQUEST_SEED + request_sets.REQUEST_SETS
    )
    per_set = [
        objective_value(
            space_objective(space), simulate_sweep(model, space.workload, noise=0, requests_seed=s)
        )
        for s in seeds
    ]
    assert len({round(v, 1) for v in per_set}) > 1, "the draws should differ: replies end on their own"
    cache: dict[str, float] = {}
    mean = request_sets.expected_value(space, best, cache)
    assert mean == pytest.approx(sum(per_set) / len(per_set))
    assert mean != pytest.approx(true_value(space, best), rel=1e-4)
    assert cache[space.key(best)] == mean

    # The largest static fraction with CUDA graphs up to batch 512 runs out of memory at capture.
    too_big = space.complete(
        {**best, "mem_fraction_static": 0.94, "cuda_graph_max_bs": 512, "max_running_requests": 512}
    )
    assert true_value(space, too_big) == 0.0
    assert request_sets.expected_value(space, too_big, cache) == 0.0


def test_a_cached_study_is_run_again_when_any_module_it_ran_changes(tmp_path: Path) -> None:
    """The suite's cache serves a study's result only while the code it ran is unchanged:
    the pruner and the objectives (never listed by hand before) count like the trial logic,
    for the tuner and the peers alike; the sampler for the tuner alone."""
    modules = suite.study_modules()
    for name in ("tuner.study", "tuner.pruning", "tuner.level_watch", "tuner.objectives", "tuner.workload"):
        assert name in modules, f"{name} is not in the suite's cache key"
    assert "tuner.sampler" not in modules
    before = suite.code_hashes()
    pruner = modules["tuner.pruning"]
    copy = tmp_path / "pruning.py"
    copy.write_bytes(pruner.read_bytes())
    assert suite.code_hashes({**modules, "tuner.pruning": copy}) == before
    copy.write_bytes(pruner.read_bytes() + b"\n# changed\n")
    changed = suite.code_hashes({**modules, "tuner.pruning": copy})
    assert changed["peer"] != before["peer"] and changed["tuner"] != before["tuner"]
    assert before["tuner"].startswith(before["peer"]) and before["tuner"] != before["peer"]


def test_the_archived_studies_are_served_by_key_and_a_stale_one_is_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh clone has no cache: the studies behind the README's table come from the
    tracked archive, but only under the key of the code that ran them; a study archived
    under another key (code since changed) runs again."""
    from studies import Job, StudyResult

    monkeypatch.setattr(suite, "CACHE", tmp_path / "cache")
    served, stale = Job("tuner", 0, 2, space=suite.REFERENCE), Job("tuner", 1, 2, space=suite.REFERENCE)
    keys = suite.cache_keys([served, stale])
    archived = {
        keys[served.key]: StudyResult(served, rec_value=[1.0, 2.0], server_s=[3.0, 4.0]),
        "another-code": StudyResult(stale, rec_value=[1.0, 2.0], server_s=[3.0, 4.0]),
    }
    path = tmp_path / "suite_studies.json.gz"
    suite.write_archive(archived, path)
    first = path.read_bytes()
    suite.write_archive(archived, path)
    assert path.read_bytes() == first, "the same results must give the same archive bytes"

    got = suite.run_cached([served, stale], 1, fresh=False, archive=suite.read_archive(path))
    assert got[0].to_json() == archived[keys[served.key]].to_json()
    assert got[1].job == stale and got[1].rec_value != [1.0, 2.0] and len(got[1].rec_value) == 2
    assert (tmp_path / "cache" / f"{keys[stale.key]}.json").is_file()
    assert suite.read_archive(tmp_path / "missing.json.gz") == {}


def test_the_tracked_archive_holds_the_studies_of_the_suite_table() -> None:
    """benchmarks/results/suite_studies.json.gz and suite.json come from the same run: scored
    again, the archived studies give every row's per-seed shares (what the README's table
    and the paired comparisons are computed from)."""
    archive = [suite.StudyResult.from_json(r) for r in suite.read_archive().values()]
    assert archive, f"{suite.ARCHIVE} is missing: run benchmarks/suite.py --readme"
    table = json.loads((suite.RESULTS / "suite.json").read_text())
    names = {peer: name for name, peer in suite.STRATEGIES.items()}
    for space, entry in table["spaces"].items():
        for name, row in entry["rows"].items():
            studies = [
                r
                for r in archive
                if (r.job.space, names[r.job.strategy], r.job.budget) == (space, name, row["budget"])
            ]
            assert studies, f"{space} {name}: not in the archive; run benchmarks/suite.py --readme"
            scored = suite.score(sorted(studies, key=lambda r: r.job.seed), entry["best"], row["budget"])
            assert dict(zip(scored["seed_ids"], scored["shares"], strict=True)) == pytest.approx(
                dict(zip(row["seed_ids"], row["shares"], strict=True))
            ), f"{space} {name}: the archive and suite.json disagree; run benchmarks/suite.py --readme"


def test_the_start_bundles_benchmark_takes_one_value_out_of_every_start_point() -> None:
    """benchmarks/start_bundles.py: the second start list is the space's own with one
    parameter left at the engine's default in every point and nothing else changed (the
    trace space's points keep the decode steps, channels, threads and buffers that ride with
    NCCL_PROTO=LL); the third has none, so a study starts from the engine's defaults under
    each layout; the workload, a replayed trace, is the space's own in all three."""
    import start_bundles

    from tuner.start_points import defaults

    space = space_named("kimi-k2.6-8x-rtx-pro-6000-trace")
    written = space.start_points()
    assert any(p["nccl_proto"] == "LL" for p in written)
    without = start_bundles.start_list(space, "without nccl_proto", "nccl_proto")
    assert without.workload == space.workload
    points = without.start_points()
    assert len(points) == len(written)
    for before, after in zip(written, points, strict=True):
        assert after["nccl_proto"] is None
        assert {k: v for k, v in after.items() if k != "nccl_proto"} == {
            k: v for k, v in before.items() if k != "nccl_proto"
        }
    bare = start_bundles.start_list(space, start_bundles.ENGINE_DEFAULTS, "nccl_proto")
    assert bare.start_points() == [] and bare.workload == space.workload
    assert defaults(bare, 40), "a space without a list starts from the engine's defaults"
    assert start_bundles.start_list(space, start_bundles.AS_WRITTEN, "nccl_proto") is space


def test_the_noise_share_benchmark_refuses_bad_input_before_running_anything(capsys) -> None:
    """benchmarks/noise_share.py: a space outside the suite or a negative noise level is a
    usage error (exit 2) before any study runs; a level's summary counts recommendations
    and launches within 2% of the best."""
    import noise_share

    for argv, said in (
        (["--spaces", "no-such-space"], "not a suite space: no-such-space"),
        (["--noise", "-0.01"], "0 or more"),
        (["--noise", "zero"], "not a comma-separated list of numbers"),
    ):
        with pytest.raises(SystemExit) as exit_:
            noise_share.main(argv)
        assert exit_.value.code == 2 and said in capsys.readouterr().err
    row = noise_share.summary([0.99, 0.97, 1.0], [1.0, 0.985, 1.0], [4.0, 5.0, 6.0])
    assert (row["within_2"], row["launched_2"], row["worst_share"], row["server_h"]) == (2, 3, 0.97, 5.0)
