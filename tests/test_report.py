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
import sys
from pathlib import Path

import pytest

from tests.helpers import CHROMIUM, CHROMIUM_FLAGS
from tuner.cli import main
from tuner.report import (
    FIGURES,
    ReportData,
    failure_rows,
    importances,
    layout_label,
    pareto_front,
    render_markdown,
)
from tuner.space import DEFAULT_SPACE
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
    """One simulated study of the reference space for the module's tests (they only read
    it), 14 trials from start points that include EPLB on and a request cap whose CUDA
    graphs run out of memory, so that the failure and importance tables have rows whatever
    the sampler's trajectory; seed 8's walk also prunes EPLB and CUDA graphs off."""
    where = tmp_path_factory.mktemp("study")
    (where / "reference.yaml").write_text(
        f"extends: {DEFAULT_SPACE}\n"
        "start:\n"
        "  - {layout: tp8, ep_size: 1, max_running_requests: 256, mem_fraction_static: 0.88}\n"
        "  - {layout: tp8, ep_size: 8, enable_eplb: false, max_running_requests: 256, mem_fraction_static: 0.88}\n"
        "  - {layout: tp8, ep_size: 8, enable_eplb: true, max_running_requests: 256, mem_fraction_static: 0.88}\n"
        "  - {layout: tp8, ep_size: 8, enable_eplb: false, max_running_requests: 512, mem_fraction_static: 0.94}\n"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(where)
        assert main(["search", "--space", "reference.yaml", "--budget", "14", "--seed", "8", "--quiet"]) == 0
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
    header = "| rank | trial | estimate tok/s | C=1 tok/s | peak tok/s | at C | GiB left | layout | differs from winner"
    assert header in md
    assert re.search(r"^\| 1 \| #\d+ \| [\d.]+ \|.*\| \(winner\) \|$", md, re.M)
    # The winner's GPU memory left after start-up (the simulator's memory plan) is in its row.
    winner = next(line for line in md.splitlines() if line.startswith("| 1 |"))
    assert re.fullmatch(r"\d+\.\d", winner.split(" | ")[6]), winner
    assert "| class | count | trials | reasons |" in md
    # Per-level tok/s of the configurations the throughput figure draws (the finalists).
    assert re.search(r"^\| trial \| layout \| measured on \| C=1 \| C=32 \|", md, re.M)
    assert re.search(r"^\| #\d+ \| [^|]+ \| target launch(es)? #\d+(, #\d+)* \|", md, re.M)


def test_importances_rank_the_settings_that_cripple_a_server_high(study_dir, capsys):
    """The simulated reference study launches configurations with CUDA graphs off or expert
    load balancing on (4-8x slower at one stream) and prunes them; counted by what they
    measured, those of the two it launched rank among the three most important parameters,
    and the report's table says so."""
    data = ReportData.of(load_study(None, None), with_curves=False)
    tried = [t for t in data.trials if t.outcome in ("pruned", "complete")]
    killers = {
        name for t in tried for name in ("disable_cuda_graph", "enable_eplb") if t.params.get(name) is True
    }
    assert killers  # the study launched at least one of them (which, its trajectory decides)
    assert any(
        t.outcome == "pruned" and (t.params.get("enable_eplb") or t.params.get("disable_cuda_graph"))
        for t in tried
    )
    imp = importances(data)
    assert "pruned trials (by what they measured" in imp.note
    assert killers <= set(imp.ranked()[:3]), imp.variance
    assert sum(imp.variance.values()) == pytest.approx(1.0)
    assert imp.top and sum(imp.top.values()) == pytest.approx(1.0)

    assert main(["report", "--format", "md"]) == 0
    md = capsys.readouterr().out
    table = md[md.index("| parameter | variance share | top 10% (PED-ANOVA) |") :]
    ranked = re.findall(r"^\| (\w+) \| [\d.]+ \| [\d.-]+ \|$", table, re.M)
    assert killers <= set(ranked[:3]), ranked


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


#: A small emulated study: four target levels screened on two (C=1 and C=32), so only its
#: finalists carry the whole curve.
EMULATED_SPACE = """
name: emu-curves
engine: sglang
hardware: rtx-pro-6000-pcie-x8
model: kimi-k2.6
launch:
  command: [python3, -m, tuner.sim.server, --speedup, "20", --load-delay, "0.2", --]
  flags: {{--model-path: /models/Kimi-K2.6, --tp-size: 8, --host: 127.0.0.1, --port: {port},
          --max-running-requests: 64}}
parameters:
  ep_size: {{flag: --ep-size, type: categorical, choices: [1, 8]}}
  num_continuous_decode_steps: {{flag: --num-continuous-decode-steps, type: categorical, choices: [1, 4]}}
workload: {{kind: burst, levels: [1, 8, 16, 32], max_tokens: 64, single_max_tokens: 16}}
"""


def test_throughput_curve_of_an_emulated_study_is_its_finalists_target_measurements(
    workdir, tmp_path, monkeypatch
):
    """An emulated study (real emulator processes over HTTP, no simulator in the report):
    the throughput and latency curves are the finalists' launches on every level of the
    target workload, averaged per level, not a line between the two screening levels."""
    from tuner.measurers import SimMeasurer
    from tuner.net import free_port

    space = workdir / "emu.yaml"
    space.write_text(EMULATED_SPACE.format(port=free_port()))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "search", "--backend", "local", "--space", str(space),
         "--budget", "6", "--seed", "2", "--health-timeout", "30", "--no-annotate", "--quiet"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr

    sims: list[object] = []
    monkeypatch.setattr(SimMeasurer, "__init__", lambda self, *a, **k: sims.append(a))
    study = load_study(None, None)
    data = ReportData.of(study)
    assert data.info is not None and data.info.backend is not None
    assert data.info.backend["kind"] != "simulated"
    stored = {t.number: t for t in study.trials}
    screened = [
        t for t in stored.values() if t.user_attrs.get("fidelity") == "proxy" and t.user_attrs.get("levels")
    ]
    assert screened and all(len(t.user_attrs["levels"]) == 2 for t in screened)  # C=1 and C=32 only

    finalists = [c for c in data.curves if c.target]
    assert finalists and data.curves[: len(finalists)] == finalists
    for c in data.curves[len(finalists) :]:  # the room left: screened configurations, as points
        assert [lv["concurrency"] for lv in c.levels] == [1, 32] and c.launches == (c.trial.number,)
    for c in finalists:
        assert [lv["concurrency"] for lv in c.levels] == [1, 8, 16, 32]
        assert c.simulated is None
        launches = [stored[n] for n in c.launches]
        assert all(t.user_attrs["fidelity"] == "target" for t in launches)
        assert {t.user_attrs["config_key"] for t in launches} == {c.trial.config_key}
        for lv in c.levels:
            measured = [
                x["output_tok_s"]
                for t in launches
                for x in t.user_attrs["levels"]
                if x["concurrency"] == lv["concurrency"]
            ]
            assert lv["output_tok_s"] == pytest.approx(sum(measured) / len(measured))
            assert lv["tok_s_min"] == min(measured) and lv["tok_s_max"] == max(measured)
            assert lv["ttft_s_p99"] is not None and lv["itl_ms_p50"] is not None
    assert sims == []  # nothing in the report called the simulator

    page = tmp_path / "emulated.html"
    monkeypatch.chdir(workdir)
    assert main(["report", "-o", str(page)]) == 0
    text = page.read_text()
    assert "measured on every level of the target workload" in text and "simulator" not in text
    assert "emulator at 20x: ~" in text  # the server time, also on the modelled host
    curve = re.search(r'<div id="fig-curves".*?</script>', text, re.S)
    assert curve and '"x":[1,8,16,32]' in curve.group(0)
    assert sims == []
