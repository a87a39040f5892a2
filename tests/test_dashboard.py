"""``tuner dashboard`` end to end: a simulated study, its trials annotated, the dashboard
served on a free loopback port, and its pages loaded in headless Chromium.

Chromium's ``--dump-dom`` with ``--virtual-time-budget`` waits for the dashboard's
React app to fetch the study and render it (virtual time only advances while nothing
is loading), so no browser driver is needed. A screenshot of the trial page is kept in
the test's tmp directory (its path is printed; ``pytest -s`` shows it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import optuna_dashboard
import pytest

from tests.helpers import CHROMIUM, CHROMIUM_FLAGS
from tuner.annotate import (
    DASHBOARD_TRIAL_ARTIFACT_PREFIX,
    IMPORTANCE_GRAPH_ID,
    PAIR_GRAPH_ID,
    TrialAnnotator,
    annotate_trial,
    constraints_in_words,
    default_artifact_dir,
    unit_for_trial,
)
from tuner.cli import main
from tuner.commands.dashboard import dashboard_url
from tuner.estimates import best_record
from tuner.net import free_port
from tuner.objectives import stored
from tuner.report import ReportData, importances
from tuner.storage import load_study, resolve_storage

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium)"
)


def chromium(args: list[str], profile: Path, timeout: float = 60.0) -> str:
    """Run headless Chromium in its own process group; its stdout. The group is killed on timeout."""
    assert CHROMIUM is not None
    proc = subprocess.Popen(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out


def dump_dom(url: str, profile: Path, expect: list[str]) -> str:
    """The rendered DOM of ``url``, retried with more virtual time until ``expect`` all show."""
    dom = ""
    for budget_ms in (8000, 20000, 40000):
        dom = chromium([f"--virtual-time-budget={budget_ms}", "--dump-dom", url], profile)
        if all(e in dom for e in expect):
            return dom
    return dom


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"tuner dashboard exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout} s")


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group, SIGKILL if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def annotate_all(study: optuna.Study) -> list[float]:
    """annotate_trial on every trial, as the search's callback does; seconds per trial."""
    artifact_dir = default_artifact_dir(resolve_storage(study.study_name, None)[0], study.study_name)
    times = []
    for t in study.get_trials():
        unit = unit_for_trial(study, t)
        start = time.perf_counter()
        assert annotate_trial(
            study, t, artifact_dir=artifact_dir, log_path=None, unit_text=unit, records_path=None
        )
        times.append(time.perf_counter() - start)
    return times


@needs_chromium
def test_dashboard_shows_study_notes_and_artifacts(workdir, tmp_path):
    assert main(["search", "--budget", "8", "--seed", "3", "--quiet"]) == 0
    study = load_study(None, None)
    times = annotate_all(study)
    print(f"annotate_trial: {1e3 * sum(times) / len(times):.1f} ms per trial (mean of {len(times)})")
    best = best_record(study)
    assert best is not None
    n = best.number
    study_id = study._storage.get_study_id_from_name(study.study_name)

    port = free_port()
    log = tmp_path / "dashboard.out"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuner", "dashboard", "--port", str(port)],
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/api/studies", proc)
        printed = log.read_text()
        study_url = dashboard_url("127.0.0.1", port, study_id)
        assert study_url in printed, printed

        profile = tmp_path / "chromium-profile"
        figures = [f'id="user-defined-plot:{g}"' for g in (IMPORTANCE_GRAPH_ID, PAIR_GRAPH_ID)]
        dom = dump_dom(study_url, profile, [study.study_name, "Best Trial (number=", *figures])
        assert study.study_name in dom
        # The best-value card prints the stored value: 0.1 tok/s, not 16 digits (a value that
        # is stored as a whole number, 1550.0, prints without its ".0").
        card = re.search(r"Best Trial \(number=(\d+)\)</h6><h3[^>]*>([^<]+)</h3>", dom)
        assert card, dom[dom.find("Best Trial") - 200 : dom.find("Best Trial") + 400]
        assert re.fullmatch(r"\d+(\.\d)?", card.group(2)), card.group(2)
        assert float(card.group(2)) == study.trials[int(card.group(1))].value
        values = [v for t in study.trials if t.values for v in t.values]
        assert values and all(v == stored(v) for v in values)  # 0.1 tok/s, 0.01 below 10
        # tuner's own figures on the study page, drawn: the importances with pruned trials
        # counted, and the two most important parameters against each other.
        ranked = importances(ReportData.of(study, with_curves=False)).ranked()
        for marker in figures:
            drawn = dom[dom.index(marker) : dom.index(marker) + 20000]
            assert 'class="main-svg"' in drawn, marker
        pair = dom[dom.index(figures[1]) : dom.index(figures[1]) + 40000]
        assert f"Best tok/s by {ranked[0]} and {ranked[1]}" in pair
        shot = tmp_path / "dashboard-study.png"
        chromium(
            ["--virtual-time-budget=20000", "--window-size=1400,2600", f"--screenshot={shot}", study_url],
            profile,
        )
        assert shot.exists() and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
        # The study's note names the parameters to choose in the dashboard's contour plot.
        note = dump_dom(f"{study_url}/note", profile, ["Parameters that matter most"])
        assert re.search(
            f"choose <code[^>]*>{ranked[0]}</code> and <code[^>]*>{ranked[1]}</code> there", note
        )

        trial_url = f"{base}/dashboard/studies/{study_id}/trials?numbers={n}"
        unit_name = f"trial-{n}.service"
        dom = dump_dom(trial_url, profile, ["TTFT p50 s", unit_name])
        assert f"Trial {n} of {study.study_name}" in dom  # the note's heading
        table = dom[dom.index("TTFT p50 s") - 2000 : dom.index("TTFT p50 s")]
        assert "<table" in table  # the per-level table rendered as a table
        assert "Constraints:</strong>" in dom and "ExecStart" in dom  # constraint words, the unit
        assert unit_name in dom and f"trial-{n}-levels.json" in dom  # the artifact list

        shot = tmp_path / f"dashboard-trial-{n}.png"
        chromium(
            ["--virtual-time-budget=20000", "--window-size=1400,1800", f"--screenshot={shot}", trial_url],
            profile,
        )
        assert shot.exists() and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")

        # The artifact is served, and is the unit.
        metas = [
            json.loads(v)
            for k, v in study._storage.get_study_system_attrs(study_id).items()
            if k.startswith(DASHBOARD_TRIAL_ARTIFACT_PREFIX)
        ]
        meta = next(m for m in metas if m["filename"] == unit_name)
        trial_id = study.get_trials()[n]._trial_id
        with urllib.request.urlopen(f"{base}/artifacts/{study_id}/{trial_id}/{meta['artifact_id']}") as r:
            assert b"ExecStart=" in r.read()
    finally:
        stop_group(proc)
    assert proc.returncode is not None


def test_annotations_are_cheap_idempotent_and_never_raise(workdir, tmp_path):
    assert main(["search", "--budget", "6", "--seed", "5", "--quiet"]) == 0
    study = load_study(None, None)
    annotate_all(study)
    attrs = study._storage.get_study_system_attrs(study._study_id)
    artifacts = [k for k in attrs if k.startswith(DASHBOARD_TRIAL_ARTIFACT_PREFIX)]
    assert artifacts
    # Again, through the study callback: the same artifacts, replaced rather than added.
    annotator = TrialAnnotator(
        default_artifact_dir(resolve_storage(study.study_name, None)[0], study.study_name)
    )
    for t in study.get_trials():
        annotator(study, t)
    attrs = study._storage.get_study_system_attrs(study._study_id)
    assert sorted(k for k in attrs if k.startswith(DASHBOARD_TRIAL_ARTIFACT_PREFIX)) == sorted(artifacts)
    files = list(default_artifact_dir(resolve_storage(study.study_name, None)[0], study.study_name).iterdir())
    assert len(files) == len(artifacts)
    # A broken artifact directory is a warning and False, not an exception.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    t = study.get_trials()[0]
    assert annotate_trial(study, t, artifact_dir=blocker, unit_text="x") is False


def test_constraints_in_words():
    def trial(constraints: dict[str, float], single: float = 50.0) -> optuna.trial.FrozenTrial:
        t = optuna.trial.create_trial(
            value=1.0, user_attrs={"levels": [{"concurrency": 1, "output_tok_s": single}]}
        )
        for k, v in constraints.items():
            t.system_attrs[f"constraints:{k}"] = v
        return t

    assert constraints_in_words(trial({})) == "none recorded"
    assert constraints_in_words(trial({"min_single_stream": -10.0})).startswith(
        "feasible: min_single_stream: met (50.0 tok/s), 10.0 tok/s above the floor"
    )
    assert constraints_in_words(trial({"min_single_stream": 8.25})) == (
        "violated: min_single_stream: single-stream short by 8.2 tok/s"
    )
    assert "refused before launch" in constraints_in_words(trial({"feasible": 1.0}))


def test_dashboard_usage_errors(workdir, capsys):
    assert main(["dashboard"]) == 2
    assert "no study found" in capsys.readouterr().err
    assert main(["search", "--budget", "1", "--quiet"]) == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["dashboard", "--port", str(port)]) == 2
    assert "cannot listen on 127.0.0.1" in capsys.readouterr().err


def test_dashboard_url():
    assert dashboard_url("127.0.0.1", 8080, 3) == "http://127.0.0.1:8080/dashboard/studies/3"
    assert dashboard_url("::1", 8080, 1) == "http://[::1]:8080/dashboard/studies/1"
    assert dashboard_url("0.0.0.0", 80, 1) == "http://127.0.0.1:80/dashboard/studies/1"


def test_a_running_trial_gets_its_artifacts_through_optuna(tmp_path):
    study = optuna.create_study(study_name="live", direction="maximize")
    trial = study.ask()
    trial.set_user_attr("flags", ["/usr/bin/python3", "-m", "sglang.launch_server", "--tp-size", "8"])
    trial.set_user_attr("levels", [{"concurrency": 1, "output_tok_s": 90.0, "wall_s": 5.0, "completed": 1}])
    frozen = study._storage.get_trial(trial._trial_id)
    assert annotate_trial(study, frozen, artifact_dir=tmp_path, unit_text="[Unit]\n")
    metas = optuna.artifacts.get_all_artifact_meta(frozen, storage=study._storage)
    assert sorted(m.filename for m in metas) == [
        f"trial-{trial.number}-levels.json",
        f"trial-{trial.number}.service",
    ]
    assert "state:** running" in optuna_dashboard.get_note(trial).lower()
