"""A new user's first session, end to end: ``tuner search --budget 40`` on the simulator,
then ``tuner best``, ``tuner trials``, ``tuner report`` opened in headless Chromium
(offline) and ``tuner dashboard`` with its study note opened in Chromium.

Each step is checked for what that user must be told: the workload that was measured,
that the numbers are simulated (and on which host and model), and how sure the winner
is (an interval, the launches it rests on, the runner-up). Screenshots of the report and
of the dashboard's study note are kept in the test's tmp directory (their paths are
printed; ``pytest -s`` shows them) to be looked at.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import CHROMIUM
from tests.test_dashboard import chromium, dump_dom, stop_group, wait_http
from tests.test_report import figure_sections, rendered_dom
from tuner.net import free_port
from tuner.report import FIGURES

WORKLOAD = "workload: short chat prompts, C=1 at 512 max tokens, then C=32..256 (5 levels) at 2048"
BACKEND = "backend: simulated: 8x RTX PRO 6000 Blackwell (PCIe Gen5, no NVLink), Kimi K2.6"
INTERVAL = re.compile(r"estimate \d+ tok/s \(interval \d+\.\.\d+, \+-1 standard error")
RUNNER_UP = re.compile(r"runner-up: trial #\d+, estimate \d+ tok/s, [\d.]+% below")


def tuner(*argv: str, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", *argv], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_fresh_walkthrough_says_what_was_measured_on_what_and_how_sure(workdir, tmp_path):
    out = tuner("search", "--budget", "40", "--seed", "1", cwd=workdir)
    header, _, summary = out.partition("\n40 trials (")
    assert WORKLOAD in header and BACKEND in header
    assert WORKLOAD in summary and BACKEND in summary and "simulated server time" in out
    assert INTERVAL.search(summary) and RUNNER_UP.search(summary) and "rests on" in summary

    unit = tuner("best", cwd=workdir)
    comments = "\n".join(ln for ln in unit.splitlines() if ln.startswith("# "))
    assert f"# {WORKLOAD}" in comments and f"# {BACKEND}" in comments
    assert INTERVAL.search(comments) and RUNNER_UP.search(comments) and "ExecStart=" in unit

    trials = tuner("trials", cwd=workdir)
    rows = [ln for ln in trials.splitlines() if ln.startswith("#")]
    assert sum("refused" not in ln for ln in rows) == 40  # refusals come on top of the budget

    report = workdir / "report.html"
    tuner("report", "-o", str(report), cwd=workdir)
    dom = rendered_dom(report, tmp_path / "chromium-report", budget_ms=15000)
    text = re.sub(r"<[^>]+>", " ", dom)
    assert "short chat prompts" in text and "simulated: 8x RTX PRO 6000" in text
    assert "simulated server time" in text and INTERVAL.search(text) and RUNNER_UP.search(text)
    sections = figure_sections(dom)
    assert set(sections) == {f for f, _ in FIGURES}, sorted(sections)
    for name, html in sections.items():
        assert html.count('class="main-svg"') >= 1, f"{name}: no plot drawn"
    shot = tmp_path / "report.png"
    chromium(
        [
            "--virtual-time-budget=15000",
            "--window-size=1300,7000",
            f"--screenshot={shot}",
            report.resolve().as_uri(),
        ],
        tmp_path / "chromium-shot",
    )
    assert shot.exists() and shot.stat().st_size > 50_000
    print(f"screenshot: {shot}")

    port = free_port()
    log = tmp_path / "dashboard.out"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuner", "dashboard", "--port", str(port)],
            cwd=workdir,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/api/studies", proc)
        note_url = re.search(r"study note [^:]*: (\S+)", log.read_text())
        assert note_url, log.read_text()
        profile = tmp_path / "chromium-dashboard"
        dom = dump_dom(note_url.group(1), profile, ["runner-up"])
        text = re.sub(r"<[^>]+>", " ", dom)
        assert WORKLOAD in text and BACKEND in text
        assert INTERVAL.search(text) and RUNNER_UP.search(text)
        shot = tmp_path / "dashboard-study-note.png"
        chromium(
            [
                "--virtual-time-budget=15000",
                "--window-size=1400,1000",
                f"--screenshot={shot}",
                note_url.group(1),
            ],
            profile,
        )
        assert shot.exists() and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
    finally:
        stop_group(proc)
