"""What a person reads: the statement of what was measured, values as a person writes them,
refusals called refusals, the live lines of a search under a pseudo-terminal, ``tuner
best``'s confidence, ``tuner trials``' rows and options, the cost of a budget before it
runs, and a description on every subcommand's help.

The search runs are real (the simulator, a SQLite study in the test's directory) and
each is read back through the command a person would type.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_progress import run_under_pty
from tuner.cli import build_parser, main
from tuner.space import DEFAULT_SPACE, load_space, resolve_space
from tuner.statement import backend_of, backend_text, statement_lines, workload_text
from tuner.trial_record import TrialRecord
from tuner.wording import changes, changes_text, fmt_value, refusal_text
from tuner.workload import Workload

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: An unset value printed as Python's None (the engine's own messages may say "None").
PY_NONE = re.compile(r"=None\b|\bNone -> |-> None\b")
#: A float printed with its binary tail (``0.8400000000000001``).
LONG_FLOAT = re.compile(r"\d\.\d{7,}")


def tuner(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *argv], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[Path, str]:
    """A 20-trial simulated search run under a pseudo-terminal: its directory and what the
    terminal showed (escape sequences and carriage returns removed)."""
    where = tmp_path_factory.mktemp("search")
    # The reference space with one more start point, one SGLang refuses (moe-dense-tp-size 8
    # under TP4 PP2): the sampler redraws such proposals itself, so a refusal is queued here.
    space = resolve_space(DEFAULT_SPACE).read_text() + "  - {layout: tp4pp2, moe_dense_tp_size: 8}\n"
    (where / "space.yaml").write_text(space)
    raw = run_under_pty(
        [sys.executable, "-m", "tuner", "search", "--space", "space.yaml", "--budget", "20", "--seed", "1"],
        where,
    )
    return where, ANSI.sub("", raw).replace("\r\n", "\n")


def test_statement_names_workload_backend_and_units():
    reference = Workload(levels=(1, 32, 64, 128, 192, 256), max_tokens=2048, single_max_tokens=512)
    assert workload_text(reference) == (
        "short chat prompts, C=1 at 512 max tokens, then C=32..256 (5 levels) at 2048, "
        "burst (all C requests at once), EOS honoured"
    )
    sim = backend_of("sim", hardware="rtx-pro-6000-pcie-x8", model="kimi-k2.6")
    assert backend_text(sim).startswith("simulated: 8x RTX PRO 6000")
    assert "Kimi K2.6" in backend_text(sim)
    emulated = backend_of(
        "local",
        command=[
            "python3",
            "-m",
            "tuner.sim.server",
            "--hardware",
            "rtx-pro-6000-pcie-x8",
            "--speedup",
            "10",
        ],
    )
    assert backend_text(emulated).startswith("emulated: ") and "10x" in backend_text(emulated)
    real = backend_of("ssh", command=["python3", "-m", "sglang.launch_server"], hosts=["gpu-a"])
    assert backend_text(real) == "real: ssh on gpu-a"
    lines = statement_lines(reference, sim)
    assert [line.split(":")[0] for line in lines] == ["workload", "backend", "units"]


def test_values_and_refusals_read_as_a_person_writes_them():
    assert fmt_value(0.8400000000000001) == "0.84"
    assert fmt_value(None) == "-"
    assert fmt_value(True) == "true" and fmt_value(16777216) == "16777216"
    # Two configurations differ where a person reading them would see a difference.
    winner = {"mem_fraction_static": 0.88, "num_continuous_decode_steps": 1, "nccl_proto": None}
    other = {"mem_fraction_static": 0.8800000000000001, "num_continuous_decode_steps": 8, "nccl_proto": "LL"}
    assert changes(winner, other) == {"num_continuous_decode_steps": (1, 8), "nccl_proto": (None, "LL")}
    assert changes_text(changes(winner, other)) == "num_continuous_decode_steps 1 -> 8, nccl_proto - -> LL"
    text = refusal_text(
        "crash: ZeroDivisionError: integer division or modulo by zero; constraint: ep must divide tp",
        "sglang",
    )
    assert text == (
        "refused by SGLang's rules: ZeroDivisionError: integer division or modulo by zero; "
        "refused by the space's constraint: ep must divide tp"
    )


def test_live_lines_name_the_change_and_call_refusals_refusals(searched):
    _, out = searched
    head = out.split("\n", 4)
    assert "workload: short chat prompts" in out.split("#0 ")[0], head
    assert "backend: simulated: 8x RTX PRO 6000" in out.split("#0 ")[0], head
    lines = [ln for ln in re.split(r"[\r\n]+", out) if re.match(r"#\d+ ", ln)]
    # The budget counts verdicts: refusals before launch come on top of the 20.
    assert len([ln for ln in lines if "refused" not in ln]) == 20, out[-3000:]
    # A new best names what changed, as name old -> new.
    news = [ln for ln in lines if "new best" in ln]
    assert news and all(re.search(r"new best \([+-]\d+\.\d% over #\d+\): \w+ \S+ -> \S+", n) for n in news), (
        news
    )
    # No Python reprs: unset is "-", floats are short; a refusal is a refusal.
    assert not any(PY_NONE.search(ln) for ln in lines), lines
    assert not any(LONG_FLOAT.search(ln) for ln in lines), lines
    refused = [ln for ln in lines if "refused" in ln]
    assert refused and all("refused by SGLang's rules: " in ln for ln in refused), refused
    assert not any(re.search(r"\bcrash: ZeroDivisionError", ln) for ln in lines)
    # The status line showed the level being measured, not only the last one done.
    assert re.search(r"level 1/2 C=1: \d+ tok/s, measuring C=256 \(level 2/2\)", out)
    # The summary: simulated server time, the statement again, the confidence.
    summary = out.split("\n20 trials (", 1)[1]
    assert "simulated server time" in out and "units: tok/s" in summary
    assert re.search(r"rule-refused proposals: \d+ of \d+ \(\d+%\); none launched a server", summary)
    assert re.search(r"estimate \d+ tok/s \(interval \d+\.\.\d+", summary)
    assert "runner-up: trial #" in summary and "tok/s per user" in summary


def test_best_states_its_confidence_in_the_unit_and_json(searched):
    where, _ = searched
    unit = tuner("best", cwd=where)
    assert unit.returncode == 0, unit.stderr
    header = [ln for ln in unit.stdout.splitlines() if ln.startswith("#")]
    text = "\n".join(header)
    assert "# workload: short chat prompts" in text and "# backend: simulated: " in text
    assert re.search(r"# estimate \d+ tok/s \(interval \d+\.\.\d+, \+-1 standard error at [\d.]+% ", text)
    assert re.search(r"rests on \d+ launch(es)? \(#\d+", text)
    assert re.search(r"# runner-up: trial #\d+, estimate \d+ tok/s, [\d.]+% below", text)
    # The winning level (C=192 or C=256 here) turns on a near-tie that numpy's BLAS kernels
    # round one way or the other on different CPUs.
    assert re.search(r"# at C=(192|256): [\d.]+ tok/s per user, ITL p50 \d+ ms, TTFT p99 [\d.]+ s", text)
    doc = json.loads(tuner("best", "--format", "json", cwd=where).stdout)
    conf = doc["confidence"]
    assert conf["interval"][0] < conf["estimate"] < conf["interval"][1]
    assert conf["launches"] == len(doc["runs"]) and conf["runner_up"]["trial"] != doc["trial"]
    # What the runner-up sets differently is named, as `tuner trials` names the runner-up's
    # differences from the best: near a tie, the settings the study could not decide between.
    differs = conf["runner_up"]["differs"]
    assert differs and all(doc["params"].get(name) == pair[0] for name, pair in differs.items()), differs
    rows = json.loads(tuner("trials", "--format", "json", cwd=where).stdout)
    row = next(r for r in rows if r["trial"] == conf["runner_up"]["trial"])
    assert sorted(row["changes"].split()) == sorted(f"{n}={fmt_value(v)}" for n, (_, v) in differs.items())
    said = next(ln for ln in header if ln.startswith("# runner-up: "))
    assert said.endswith("; it differs in " + changes_text({n: tuple(p) for n, p in differs.items()})), said
    assert set(conf["at_winning_level"]) >= {"per_user_tok_s", "itl_ms_p50", "ttft_s_p99"}
    assert doc["measured"]["backend"].startswith("simulated: ")


def test_trials_rows_sort_filter_columns_and_formats(searched):
    where, _ = searched
    out = tuner("trials", cwd=where).stdout
    rows = [ln for ln in out.splitlines() if ln.startswith("#")]
    counted = [r for r in rows if "refused" not in r]  # refusals come on top of the budget
    assert len(counted) == 20 and not PY_NONE.search(out)
    assert sum("(best)" in r for r in rows) == 1
    by_value = json.loads(
        tuner("trials", "--sort", "value", "--state", "complete", "--format", "json", cwd=where).stdout
    )
    values = [r["value"] for r in by_value]
    assert values == sorted(values, reverse=True) and all(r["state"] == "complete" for r in by_value)
    table = list(
        csv.reader(
            io.StringIO(tuner("trials", "--columns", "trial,state", "--format", "csv", cwd=where).stdout)
        )
    )
    assert table[0] == ["trial", "state"] and len(table) == len(rows) + 1
    refused = tuner("trials", "--state", "refused", cwd=where).stdout
    assert "refused by SGLang's rules" in refused
    bad = tuner("trials", "--columns", "trial,nope", cwd=where)
    assert bad.returncode == 2 and "nope" in bad.stderr


def test_budget_below_the_start_points_leaves_nothing_queued_and_names_what_it_skipped(workdir):
    """The reference space has 5 start configurations: a budget of 3 runs two of them and
    confirms the leader on the target workload, leaves no WAITING trial in the study, and
    says which start configurations it did not run; a larger budget runs them."""
    from optuna.trial import TrialState

    from tuner.storage import load_study

    proc = tuner("search", "--budget", "3", "--seed", "1", "--quiet", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert "3 trials (3 complete)" in proc.stdout and "waiting" not in proc.stdout
    assert "3 start configuration(s) not run" in proc.stdout
    skipped = re.findall(r"^  (start point \d): (.*)$", proc.stdout, re.M)
    assert [label for label, _ in skipped] == ["start point 3", "start point 4", "start point 5"]
    assert all("=None" not in params and "num_continuous_decode_steps=8" in params for _, params in skipped)
    study = load_study(None, None)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3
    assert "not confirmed on the target" not in proc.stdout

    more = tuner("search", "--budget", "8", "--seed", "1", "--quiet", cwd=workdir)
    assert more.returncode == 0, more.stderr
    assert "not run" not in more.stdout
    study = load_study(None, None)
    assert len(study.trials) == 8  # nothing left waiting or running
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.trials)
    queued = [t.system_attrs.get("fixed_params") for t in study.trials]
    skipped_points = load_space(resolve_space("kimi-k2.6-8x-rtx-pro-6000")).start_points()[2:]
    assert len(skipped_points) == 3 and all(p in queued for p in skipped_points)  # they ran


def test_dry_run_prints_gpu_hours_and_launches_nothing(workdir):
    proc = tuner("search", "--budget", "40", "--startup-s", "540", "--dry-run", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert re.search(
        r"40 x \(start-up 540 s \+ screening sweep ~\d+ s \(simulated\)\) = [\d.]+ h of server time "
        r"= [\d.]+ GPU hours on 8 GPUs",
        proc.stdout,
    )
    assert "workload: " in proc.stdout
    assert not list(workdir.glob("studies/*.db"))


def test_goodput_limits_from_the_command_line(workdir):
    from tuner.commands.search import make_objective
    from tuner.space import DEFAULT_SPACE, load_space, resolve_space

    parser = build_parser()
    args = parser.parse_args(["search", "--objective", "goodput", "--ttft-ms", "500", "--tpot-ms", "50"])
    objective = make_objective(load_space(resolve_space(DEFAULT_SPACE)), args)
    assert (objective.name, objective.ttft_s, objective.tpot_ms) == ("goodput", 0.5, 50.0)
    help_text = parser._subparsers._group_actions[0].choices["search"].format_help()
    assert "default 2000" in help_text and "default 100" in help_text
    assert main(["search", "--ttft-ms", "0", "--dry-run"]) == 2


def test_every_subcommand_has_a_description_and_no_help_names_a_missing_flag():
    parser = build_parser()
    choices = parser._subparsers._group_actions[0].choices
    for name, sub in choices.items():
        assert sub.description, f"tuner {name} --help has no description"
        if name in ("simulate", "emulate", "bench", "calibration"):
            continue  # their help names the server's own flags, given after --
        flags = {s for a in sub._actions for s in a.option_strings}
        for named in re.findall(r"(?<![\w-])--[a-z][a-z-]+", sub.format_help()):
            assert named in flags, f"tuner {name} --help names {named}, which it does not have"


def test_space_schema_is_the_json_schema_of_a_space_file(capsys):
    assert main(["space", "--schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"parameters", "launch", "workload", "objective", "start"} <= set(schema["properties"])
    assert "CategoricalParameter" in schema["$defs"]


def test_note_of_a_refused_trial_reads_as_not_measured(searched, monkeypatch):
    from tuner.annotate import trial_note
    from tuner.storage import load_study

    where, _ = searched
    monkeypatch.chdir(where)
    study = load_study(None, None)
    refused = [t for t in study.get_trials() if TrialRecord.of(t).outcome == "infeasible"]
    assert refused
    note = trial_note(study.study_name, refused[0], unit_text=None, artifacts=[], engine="sglang")
    assert "Not a measurement" in note and "refused by SGLang" in note
    assert "none measured" in note and "Value:** 0.0 tok/s" not in note


def _record(number: int, value: float, key: str, mem: float, runs: tuple[int, ...] = ()) -> TrialRecord:
    from dataclasses import replace

    import optuna
    from optuna.distributions import FloatDistribution

    t = optuna.trial.create_trial(
        params={"mem_fraction_static": mem},
        distributions={"mem_fraction_static": FloatDistribution(0.8, 0.95)},
        value=value,
        user_attrs={"outcome": "complete", "config_key": key},
    )
    t.number = number
    return replace(TrialRecord.of(t), runs=runs or (number,), mean=value)


def test_a_best_that_moves_down_says_why():
    from tuner.progress import trial_line

    before = _record(20, 2780.0, "a", 0.88)
    repeat = _record(21, 2762.0, "a", 0.88)
    after = _record(20, 2771.0, "a", 0.88, runs=(20, 21))
    line = trial_line(repeat, after, previous=before)
    assert "best estimate down 2780 -> 2771: #21 measured #20's configuration again at 2762" in line
    better = _record(22, 2900.0, "b", 0.9000000000000001)
    line = trial_line(better, better, previous=after)
    assert "new best (+4.7% over #20): mem_fraction_static 0.88 -> 0.9" in line
