"""``tuner report``: one self-contained HTML page whose every plot renders with the
network off (headless Chromium), and the Markdown tables.

Networking is cut two ways: every request goes to a proxy on a closed loopback port,
and every host name resolves to nothing. A plot that needed anything from outside the
file (plotly.js from a CDN, MathJax, a font) would not draw.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import CHROMIUM, CHROMIUM_FLAGS
from tuner.cli import main
from tuner.report import (
    FIGURES,
    ReportData,
    failure_rows,
    layout_label,
    pareto_front,
    render_markdown,
)
from tuner.storage import load_study

#: Offline: every connection goes to a dead proxy and no name resolves.
OFFLINE_CHROMIUM = [*CHROMIUM_FLAGS, "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND"]


def rendered_dom(page: Path, profile: Path, budget_ms: int = 10000) -> str:
    """The DOM of ``page`` after Chromium ran its scripts, offline."""
    assert CHROMIUM is not None
    proc = subprocess.Popen(
        [
            CHROMIUM,
            *OFFLINE_CHROMIUM,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out


def figure_sections(dom: str) -> dict[str, str]:
    """The DOM of each figure div, from its ``id="fig-..."`` to the next one."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div id="fig-([a-z]+)"', dom)]
    return {
        name: dom[pos : starts[i + 1][0] if i + 1 < len(starts) else len(dom)]
        for i, (pos, name) in enumerate(starts)
    }


@pytest.fixture(scope="module")
def _study(tmp_path_factory):
    """One simulated study for the module's tests (they only read it)."""
    where = tmp_path_factory.mktemp("study")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(where)
        assert main(["search", "--budget", "14", "--seed", "3", "--quiet"]) == 0
    return where


@pytest.fixture
def study_dir(_study, monkeypatch):
    monkeypatch.chdir(_study)
    return _study


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_html_report_renders_every_plot_offline(study_dir, tmp_path, capsys):
    out = study_dir / "report.html"
    assert main(["report", "-o", str(out)]) == 0
    page = out.read_text()
    # plotly.js exactly once, inline; nothing loaded from elsewhere.
    assert page.count("<script") == page.count("</script>")
    assert len(re.findall(r"\* plotly\.js v\d", page)) == 1
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=", page)
    figures = re.findall(r'<div id="fig-([a-z]+)" class="plotly-graph-div"', page)
    assert {"history", "intermediate", "pareto", "curves"} <= set(figures), figures
    assert set(figures) <= {f for f, _ in FIGURES}

    dom = rendered_dom(out, tmp_path / "chromium-profile")
    sections = figure_sections(dom)
    assert sorted(sections) == sorted(figures)
    for name, html in sections.items():
        assert "js-plotly-plot" in html.split(">", 1)[0], f"{name}: plotly did not take the div"
        assert html.count('class="main-svg"') >= 1, f"{name}: no plot drawn"
    assert len(re.findall(r'class="[^"]*\bjs-plotly-plot\b', dom)) == len(figures)
    # The page's tables.
    assert "Top configurations" in dom and "Failures by class" in dom and "(winner)" in dom


def test_markdown_report_has_the_tables(study_dir, capsys):
    assert main(["report", "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "<script" not in md and "plotly" not in md
    for heading in ("### Top configurations", "### Parameter importances", "### Failures by class"):
        assert heading in md
    header = "| rank | trial | estimate tok/s | C=1 tok/s | peak tok/s | at C | layout | differs from winner"
    assert header in md
    assert re.search(r"^\| 1 \| #\d+ \| [\d.]+ \|.*\| \(winner\) \|$", md, re.M)
    assert "| class | count | trials | reasons |" in md
    assert re.search(r"^\| trial \| layout \| C=1 \|", md, re.M)  # per-level tok/s of the top five


def test_small_study_reports_without_importances(workdir, tmp_path, capsys):
    assert main(["search", "--budget", "2", "--seed", "1", "--quiet"]) == 0
    data = ReportData.of(load_study(None, None))
    md = render_markdown(data)
    assert "Not enough measured configurations for parameter importances" in md
    out = tmp_path / "small.html"
    assert main(["report", "-o", str(out)]) == 0
    assert "Not enough measured configurations" in out.read_text()


def test_no_study_is_a_usage_error(workdir, capsys):
    assert main(["report"]) == 2
    assert "no study found" in capsys.readouterr().err


def test_failures_are_grouped_by_class(study_dir):
    data = ReportData.of(load_study(None, None))
    rows = failure_rows(data)
    counted = sum(len(ns) for _, ns, _ in rows)
    expected = sum(
        1
        for t in data.trials
        if t.outcome in ("failed", "infeasible", "pruned") or t.attrs.get("violations") or t.state == "FAIL"
    )
    assert counted == expected
    for cls, numbers, reasons in rows:
        assert numbers and reasons and sum(k for _, k in reasons) == len(numbers), cls


def test_layout_labels_and_pareto_front():
    assert layout_label(["python3", "-m", "sglang.launch_server", "--tp-size", "8"]) == "TP8"
    assert layout_label(["--tp-size", "8", "--ep-size", "8"]) == "TP8 EP8"
    assert layout_label(["--tp-size=4", "--pp-size", "2"]) == "TP4 PP2"
    assert layout_label(["--pp-size", "8", "--ep-size", "8", "--enable-eplb"]) == "PP8 EP8 EPLB"
    assert (
        layout_label(["--tp-size", "8", "--ep-size", "4", "--moe-a2a-backend", "deepep"]) == "TP8 EP4 DeepEP"
    )
    # TP8 wins one stream, EP8 the peak; the third is beaten by both.
    points = [(98.0, 1305.0), (65.0, 1439.0), (60.0, 1200.0), (98.0, 1250.0)]
    assert pareto_front(points) == [1, 0]
