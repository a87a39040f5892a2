"""The study on the simulator: feasibility, pruning, reuse, resume, and the best unit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import optuna
import pytest

from tests.helpers import SMALL_SPACE as SPACE
from tuner import budget
from tuner.cli import main
from tuner.measurers import SimMeasurer
from tuner.objectives import Objective
from tuner.space import Space, load_space
from tuner.storage import load_study
from tuner.study import Search
from tuner.systemd_unit import parse_shell
from tuner.trial_record import TrialRecord


def make_search(space, budget, *, noise: float = 0.0, seed: int = 0, **kw) -> Search:
    """A study of ``space`` on the simulator (noise-free unless ``noise`` says otherwise)."""
    return Search(
        space,
        SimMeasurer(space.hardware, space.model, noise=noise),
        study_name="small",
        storage="sqlite:///studies/small.db",
        objective=Objective(),
        seed=seed,
        budget=budget,
        **kw,
    )


def enqueue(search: Search, *configs: dict) -> None:
    for c in configs:
        search.study.enqueue_trial({"ep_size": 8, "enable_eplb": False, "disable_cuda_graph": False, **c})


def records(search: Search) -> list[TrialRecord]:
    return [TrialRecord.of(t) for t in search.study.get_trials()]


def test_impossible_combinations_cost_no_launch_and_are_infeasible(space):
    # A rejected proposal uses up no budget: one launch is the budget of these three trials.
    search = make_search(space, 1)
    enqueue(search, {"ep_size": 3}, {"ep_size": 1, "enable_eplb": True}, {"ep_size": 8})
    search.run()
    bad_ep, eplb_no_ep, ok = records(search)
    assert bad_ep.outcome == "infeasible" and "divisible" in bad_ep.attrs["reason"]
    assert eplb_no_ep.outcome == "infeasible" and "ep_size > 1" in eplb_no_ep.attrs["reason"]
    assert bad_ep.attrs["server_s"] == 0 and "levels" not in bad_ep.attrs
    assert ok.outcome == "complete" and len(ok.attrs["levels"]) == 3
    frozen = search.study.get_trials()
    assert frozen[0].system_attrs["constraints:feasible"] > 0  # the sampler sees it infeasible


def test_eplb_and_no_graph_trials_stop_after_the_first_level(space):
    search = make_search(space, 6)
    enqueue(
        search,
        {"ep_size": 8},
        {"ep_size": 4},
        {"ep_size": 1},
        {"ep_size": 8, "enable_eplb": True},
        {"ep_size": 1, "disable_cuda_graph": True},
        {"ep_size": 4, "disable_cuda_graph": True},
    )
    search.run()
    recs = records(search)
    assert [r.outcome for r in recs[:3]] == ["complete"] * 3
    for r in recs[3:]:
        assert r.outcome == "pruned" and r.state == "PRUNED"
        # Stopped inside that level: it could not reach the bar (tuner.level_watch).
        assert len(r.attrs["levels"]) == 1 and r.attrs["levels"][0]["stopped_early"]
        assert r.attrs["reason"].startswith("pruned at level 1 (C=1, stopped after ")


def test_identical_configuration_reuses_the_measurement(space):
    search = make_search(space, 3)
    enqueue(search, {"ep_size": 4}, {"ep_size": 8}, {"ep_size": 4})
    search.run()
    first, _, again = records(search)
    assert again.outcome == "reused" and again.attrs["reused_from"] == first.number
    assert again.attrs["server_s"] == 0 and first.attrs["server_s"] > 0
    assert again.values == first.values and again.attrs["levels"] == first.attrs["levels"]


DEFAULTS_SPACE = """\
name: defaults
engine: sglang
engine_version: "0.5.23"
hardware: rtx-pro-6000-pcie-x8
model: kimi-k2.6
launch:
  command: [python3, -m, sglang.launch_server]
  flags: {--model-path: /models/Kimi-K2.6, --tp-size: 8, --ep-size: 8, --mem-fraction-static: 0.88,
          --max-running-requests: 256, --num-continuous-decode-steps: 8}
parameters:
  moe_dense_tp_size: {flag: --moe-dense-tp-size, type: categorical, choices: [null, 1, 8]}
  nccl_buffsize: {env: NCCL_BUFFSIZE, type: categorical, choices: [null, 4194304, 16777216]}
  nccl_nthreads: {env: NCCL_NTHREADS, type: categorical, choices: [null, 256, 512]}
  cuda_graph_max_bs: {flag: --cuda-graph-max-bs-decode, type: categorical, choices: [null, 128, 256, 512]}
  nccl_proto: {env: NCCL_PROTO, type: categorical, choices: [null, LL, "LL,Simple"]}
workload: {kind: burst, levels: [1, 64], max_tokens: 512, single_max_tokens: 128}
"""


def test_a_setting_spelled_at_its_default_is_the_same_server(workdir):
    """Settings that start the server measured first are reused, not restarted for:
    NCCL_BUFFSIZE=4194304 (NCCL's default), NCCL_PROTO=LL,Simple (NCCL's protocols over
    PCIe, where it leaves LL128 off), --moe-dense-tp-size 8 under TP 8 (SGLang's default),
    and with 256 running requests a decode-graph limit of 256 or 512 (SGLang captures none
    larger than its request pool; its default is 512 at TP 8 on a 96 GB GPU). A setting
    whose default depends on the topology (NCCL_NTHREADS) and values that change the server
    (16 MiB, LL alone, dense TP 1, graphs up to 128) are launches of their own."""
    same = (
        {"nccl_buffsize": 4194304},
        {"moe_dense_tp_size": 8, "nccl_buffsize": 4194304},
        {"cuda_graph_max_bs": 512},
        {"cuda_graph_max_bs": 256, "moe_dense_tp_size": 8},
        {"nccl_proto": "LL,Simple"},
    )
    other = (
        {"nccl_buffsize": 16777216},
        {"nccl_proto": "LL"},
        {"moe_dense_tp_size": 1},
        {"nccl_nthreads": 512},
        {"cuda_graph_max_bs": 128},
    )
    _assert_one_server_each(workdir / "defaults.yaml", DEFAULTS_SPACE, same, other)


def test_on_a_b200_its_own_memory_defaults_are_the_same_server(workdir):
    """SGLang's defaults depend on the GPU's memory: from 160 GiB (B200) it chunks prefill by
    16384 tokens and captures up to 512 decode graphs at any TP, so those spelled out are the
    server measured first and 8192 tokens (the 96 GB card's default) is another."""
    text = DEFAULTS_SPACE.replace("rtx-pro-6000-pcie-x8", "b200-x8").replace(
        "parameters:\n",
        "parameters:\n  chunked_prefill_size: {flag: --chunked-prefill-size, type: categorical,"
        " choices: [null, 8192, 16384]}\n",
    )
    same = ({"chunked_prefill_size": 16384}, {"chunked_prefill_size": 16384, "cuda_graph_max_bs": 512})
    other = ({"chunked_prefill_size": 8192},)
    _assert_one_server_each(workdir / "b200.yaml", text, same, other)


def _assert_one_server_each(path, text: str, same: tuple[dict, ...], other: tuple[dict, ...]) -> None:
    """A study of the space ``text`` measures its first configuration (every parameter unset),
    then reuses that launch for each of ``same`` and launches each of ``other``."""
    path.write_text(text)
    space = load_space(path)
    search = make_search(space, 1 + len(same) + len(other))
    unset = dict.fromkeys(space.parameters)
    for changed in ({}, *same, *other):
        search.study.enqueue_trial({**unset, **changed})
    search.run()
    first, *rest = records(search)
    assert first.outcome == "complete" and first.attrs["server_s"] > 0
    for trial in rest[: len(same)]:
        assert trial.outcome == "reused" and trial.attrs["reused_from"] == first.number
        assert trial.attrs["server_s"] == 0
    for trial in rest[len(same) :]:
        assert trial.outcome == "complete" and trial.attrs["server_s"] > 0


def test_every_trial_of_a_study_serves_the_same_requests(space):
    """Configurations are compared on one request set (common random numbers): two
    configurations measured under noise generate the same replies, level by level; a run
    that resumes the study (another worker, another ``--seed``) serves the same requests;
    a new study of another seed serves others."""
    # Replies that end on their own (2048 max tokens), so the request draw shows.
    chat = space.workload.model_copy(update={"levels": (1, 32), "max_tokens": 2048})
    space = Space(space.spec.model_copy(update={"workload": chat, "proxy": "none"}), source=space.source)

    def tokens(search: Search) -> list[dict[int, int]]:
        return [{lv["concurrency"]: lv["output_tokens"] for lv in r.attrs["levels"]} for r in records(search)]

    def study(seed: int, *configs: dict, fresh: bool = True) -> list[dict[int, int]]:
        if fresh:
            shutil.rmtree("studies", ignore_errors=True)
        search = make_search(space, len(configs) + (0 if fresh else 2), noise=0.02, seed=seed)
        enqueue(search, *configs)
        search.run()
        return tokens(search)

    ep8, ep4 = study(4, {"ep_size": 8}, {"ep_size": 4})
    assert ep8 == ep4 and ep8[32] != 32 * 2048
    *_, resumed = study(9, {"ep_size": 1}, fresh=False)
    assert resumed == ep8
    other, _ = study(5, {"ep_size": 8}, {"ep_size": 4})
    assert other != ep8


def test_interrupted_study_resumes_to_its_budget(space):
    search = make_search(space, 6)
    calls = {"n": 0}

    def interrupt(trial, i, metrics):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt

    search.on_level = interrupt
    with pytest.raises(KeyboardInterrupt):
        search.run()
    states = [t.state for t in search.study.get_trials()]
    assert optuna.trial.TrialState.RUNNING not in states
    again = make_search(space, 6)
    again.run()
    assert again.finished() == 6
    assert all(t.state != optuna.trial.TrialState.RUNNING for t in again.study.get_trials())


def test_budget_counts_finished_trials_and_rerun_adds_nothing(space):
    first = make_search(space, 4)
    first.run()
    trials = len(first.study.get_trials())
    search = make_search(space, 4)
    search.run()
    # The budget counts verdicts: rejected proposals (infeasible) are recorded, not counted.
    assert budget.verdicts(search.study.get_trials()) == 4
    assert len(search.study.get_trials()) == trials


def run_cli(*argv: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "tuner", *argv], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_search_then_best_systemd_unit_verifies(workdir):
    rc, out = run_cli("search", "--budget", "12", "--seed", "3")
    assert rc == 0, out
    assert "best: trial #" in out and "unit file: tuner best" in out
    rc, unit = run_cli("best")
    assert rc == 0, unit
    assert "ExecStart=" in unit and "[Install]" in unit and "peak" in unit
    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.skip("systemd-analyze is not installed")
    unit = unit.replace("ExecStart=python3", f"ExecStart={sys.executable}")
    path = workdir / "sglang-tuned.service"
    path.write_text(unit)
    proc = subprocess.run([verify, "verify", str(path)], capture_output=True, text=True, timeout=60)
    problems = [ln for ln in (proc.stdout + proc.stderr).splitlines() if str(path.name) in ln]
    assert proc.returncode == 0 and not problems, proc.stdout + proc.stderr


def test_best_json_and_shell_round_trip_into_simulate(workdir):
    assert run_cli("search", "--budget", "8", "--seed", "5", "--quiet")[0] == 0
    rc, text = run_cli("best", "--format", "json")
    assert rc == 0, text
    best = json.loads(text)
    assert {"study", "trial", "value", "params", "flags", "env", "levels"} <= set(best)
    env_args = [a for k, v in best["env"].items() for a in ("--env", f"{k}={v}")]
    wl = best["workload"]
    rc, sim = run_cli(
        "simulate",
        "--json",
        "--noise",
        "0.02",
        "--seed",
        str(5 * 1_000_003 + best["trial"]),
        "--levels",
        ",".join(str(c) for c in wl["levels"]),
        "--max-tokens",
        str(wl["max_tokens"]),
        "--single-max-tokens",
        str(wl["single_max_tokens"]),
        *env_args,
        "--",
        *best["flags"],
    )
    assert rc == 0, sim
    result = json.loads(sim)
    assert result["status"] == "ok"
    # Same flags, env and seed: the simulator reproduces the stored measurement.
    for got, want in zip(result["levels"], best["levels"], strict=True):
        assert got["output_tok_s"] == pytest.approx(want["output_tok_s"], rel=0.05)
    rc, shell = run_cli("best", "--format", "shell")
    assert rc == 0 and "sglang.launch_server" in shell
    argv, env = parse_shell(shell)
    assert argv == best["argv"] and env == best["env"]


def test_trials_lists_every_trial(workdir):
    assert run_cli("search", "--budget", "5", "--seed", "1", "--quiet")[0] == 0
    rc, out = run_cli("trials")
    assert rc == 0
    assert sum(1 for ln in out.splitlines() if ln.startswith("#")) == 5


def test_bad_space_file_exits_2_and_creates_no_study(workdir):
    bad = workdir / "bad.yaml"
    bad.write_text(SPACE.replace("choices: [1, 4, 8, 3]", "choices: 7"))
    rc, out = run_cli("search", "--space", str(bad), "--budget", "2")
    assert rc == 2
    assert "bad.yaml" in out and "ep_size" in out
    assert not (workdir / "studies").exists() or not list((workdir / "studies").glob("*.db"))


def test_load_study_errors_name_what_is_missing(workdir):
    with pytest.raises(LookupError):
        load_study(None, None)
    assert main(["best"]) == 2


def test_sampler_keeps_going_when_the_space_is_exhausted(space):
    # 4 x 2 x 2 configurations, more trials than local moves can cover: the sampler falls back
    # to random jumps and TPE, and duplicates are reused rather than crashing the study.
    search = make_search(space, 24)
    search.run()
    recs = records(search)
    assert budget.verdicts(search.study.get_trials()) == 24
    assert any(r.outcome == "reused" for r in recs)


def test_dashboard_annotations_do_not_change_what_the_study_samples(workdir):
    """optuna-dashboard's save_note wraps finished trials in optuna.Trial objects, which calls
    the sampler's before_trial: that must not consume the sampler's planned moves."""
    from tuner.annotate import TrialAnnotator
    from tuner.space import DEFAULT_SPACE, resolve_space

    space = load_space(resolve_space(DEFAULT_SPACE))

    def params_of(name: str, annotate: bool) -> list[dict]:
        annotator = TrialAnnotator(workdir / f"{name}-artifacts") if annotate else None
        search = Search(
            space,
            SimMeasurer(space.hardware, space.model),
            study_name=name,
            storage=f"sqlite:///studies/{name}.db",
            objective=Objective(),
            seed=3,
            budget=14,
            on_trial=(lambda s, t: annotator(s, t)) if annotator else None,
        )
        search.run()
        return [t.params for t in search.study.get_trials()]

    assert params_of("plain", False) == params_of("annotated", True)


def test_objectives_single_goodput_pareto_and_the_single_stream_floor(space):
    def study(objective: Objective, name: str) -> list[TrialRecord]:
        search = Search(
            space,
            SimMeasurer(space.hardware, space.model, noise=0.0),
            study_name=name,
            storage=f"sqlite:///studies/{name}.db",
            objective=objective,
            seed=0,
            budget=4,
        )
        enqueue(search, {"ep_size": 8}, {"ep_size": 1}, {"ep_size": 4}, {"ep_size": 8, "enable_eplb": True})
        search.run()
        return records(search)

    single = study(Objective(name="single"), "single")
    for r in single:
        if r.outcome == "complete":
            # The value is stored at 0.1 tok/s (tuner.objectives.stored), the level as measured.
            assert r.value == pytest.approx(r.attrs["levels"][0]["output_tok_s"], abs=0.05)
    pareto = study(Objective(name="pareto"), "pareto")
    assert all(r.state != "PRUNED" for r in pareto)  # Optuna cannot prune multi-objective trials
    assert all(len(r.values) == 2 for r in pareto if r.outcome == "complete")
    goodput = study(Objective(name="goodput", ttft_s=2.0, tpot_ms=30.0), "goodput")
    for r in goodput:
        if r.outcome == "complete":
            assert 0 <= r.value <= max(lv["output_tok_s"] for lv in r.attrs["levels"]) + 1e-6
    # EP8 at NCCL defaults streams ~65 tok/s on the reference host (measured), TP8 ~98.
    floor = study(Objective(min_single_stream=70), "floor")
    ep8 = floor[0]
    assert ep8.attrs["levels"][0]["output_tok_s"] < 70 and "min_single_stream" in ep8.attrs["violations"]
    from tuner.estimates import best_record

    search = Search(
        space,
        SimMeasurer(space.hardware, space.model),
        study_name="floor",
        storage="sqlite:///studies/floor.db",
        objective=Objective(min_single_stream=70),
        budget=4,
    )
    best = best_record(search.study)
    assert best is not None and best.attrs["levels"][0]["output_tok_s"] >= 70
