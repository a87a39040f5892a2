"""The report's tables (summary, top configurations, throughput per level, failures) and
the Markdown rendering of them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from tuner.deployment import shell_text
from tuner.report.data import (
    TOP_N,
    TOP_QUANTILE,
    Importances,
    ReportData,
    _numbers,
    differences_text,
    failure_rows,
    importances,
    layout_label,
)
from tuner.statement import server_time, statement_lines
from tuner.trial_record import StudyInfo, TrialRecord

# --------------------------------------------------------------------------- tables


def summary_rows(data: ReportData) -> list[tuple[str, ...]]:
    counts = data.outcome_counts()
    server_s = sum(float(t.server_s or 0.0) for t in data.trials)
    info = data.info
    backend = info.backend if info is not None else None
    fallback = next((t.backend for t in data.trials if t.backend), None)
    statement = [
        tuple(line.split(": ", 1))
        for line in statement_lines(
            info.workload if info else None,
            backend,
            fallback_backend=fallback,
            proxy=info.proxy if info else None,
        )
    ]
    rows = [
        ("study", data.study_name),
        ("space", data.space),
        *statement,
        ("objective", data.objective + (" (single-stream and peak)" if data.multi else "")),
        ("trials", f"{len(data.trials)}: " + ", ".join(f"{v} {k}" for k, v in counts.items())),
        server_time(server_s, backend, fallback),
    ]
    b = data.best
    if b is not None:
        peak = f"{b.peak:.1f} tok/s at C={b.peak_c}" if b.peak is not None else "-"
        single = f"{b.single:.1f} tok/s" if b.single is not None else "-"
        e = data.launches(b)
        runs = f"; mean of {e.runs} launches {e.mean:.1f} tok/s" if e is not None and e.runs > 1 else ""
        if e is not None:
            runs += f"; estimate {e.value:.1f} tok/s"
        rows.append(
            (
                "winner",
                f"trial #{b.number} ({layout_label(b.argv)}): peak {peak}, single-stream {single}{runs}",
            )
        )
        if data.verdict is not None:
            rows.append(("confidence", "; ".join(data.verdict.lines())))
    else:
        rows.append(("winner", "no feasible completed trial"))
    rows.append(("generated", data.generated))
    return rows


TOP_HEADER = (
    "rank",
    "trial",
    "estimate tok/s",
    "C=1 tok/s",
    "peak tok/s",
    "at C",
    "GiB left",
    "layout",
    "differs from winner",
)


def top_rows(data: ReportData, n: int = TOP_N) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for rank, t in enumerate(data.configs()[:n], 1):
        rows.append(
            (
                str(rank),
                f"#{t.number}",
                _num(data.config_value(t)),
                _num(t.single),
                _num(t.peak),
                str(t.peak_c or "-"),
                _num(t.memory_left_gib),
                layout_label(t.argv),
                differences_text(t, data.best),
            )
        )
    return rows


def curve_rows(data: ReportData) -> tuple[list[str], list[list[str]]]:
    """Per-level tok/s of the configurations the throughput figure draws (the finalists' mean
    over their target launches, see :func:`tuner.report.data.curves`): header and rows."""
    cs = sorted({lv["concurrency"] for c in data.curves for lv in c.levels})
    rows = []
    for curve in data.curves:
        by_c = {lv["concurrency"]: lv["output_tok_s"] for lv in curve.levels}
        rows.append(
            [f"#{curve.trial.number}", layout_label(curve.trial.argv), curve.measured_on()]
            + [_num(by_c.get(c)) for c in cs]
        )
    return ["trial", "layout", "measured on"] + [f"C={c}" for c in cs], rows


IMPORTANCE_HEADER = ("parameter", "variance share", f"top {TOP_QUANTILE:.0%} (PED-ANOVA)")


def importance_rows(imp: Importances) -> list[tuple[str, str, str]]:
    """One row per parameter, most important first: its two importances."""
    return [(k, f"{v:.3f}", _num(imp.top.get(k), ".3f")) for k, v in imp.variance.items()]


def _num(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_markdown(data: ReportData) -> str:
    """The report's tables as Markdown (no figures)."""
    out = [f"## tuner report: {data.study_name}", ""]
    out += md_table(("", ""), summary_rows(data))
    if data.best is not None:
        out += ["", "Winning command:", "", "```sh", _command(data.best, data.info), "```"]
    out += ["", "### Top configurations", ""]
    rows = top_rows(data)
    out += md_table(TOP_HEADER, rows) if rows else ["No feasible measured configuration yet."]
    header, crow = curve_rows(data)
    if crow:
        out += ["", f"### Throughput per level (tok/s, mean of the launches), top {len(crow)}", ""]
        out += md_table(header, crow)
    imp = importances(data)
    out += ["", "### Parameter importances", "", imp.note]
    if imp.variance:
        out += ["", *md_table(IMPORTANCE_HEADER, importance_rows(imp))]
    out += ["", "### Failures by class", ""]
    frows = failure_rows(data)
    if frows:
        out += md_table(
            ("class", "count", "trials", "reasons"),
            [(c, len(ns), _numbers(ns), "; ".join(f"{r} (x{k})" for r, k in rs[:3])) for c, ns, rs in frows],
        )
    else:
        out.append("None: every trial gave a feasible measurement.")
    return "\n".join(out) + "\n"


def _command(t: TrialRecord, info: StudyInfo | None = None) -> str:
    """The winning command as a shell command, one flag per line (copyable as is)."""
    return shell_text(t, info or StudyInfo.of({}))
