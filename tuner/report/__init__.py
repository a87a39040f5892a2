"""A study as one self-contained report: an HTML page that opens offline, or Markdown tables.

The HTML file carries plotly.js once (inline) and every figure as a ``div`` that draws
itself with it, so it can be mailed, attached to a ticket or opened on a machine with
no network. What it shows, all from the trials' user attributes (the study's whole
state, see :mod:`tuner.trial_record`):

* a summary: what was measured on what (workload, simulated/emulated/real backend,
  units), the winner with its confidence, and the winning command, wrapped and copyable;
* latency (TTFT p99, ITL p50) against concurrency of the top configurations;
* the top configurations (distinct configurations; reused trials are copies) with
  what each changes relative to the winner;
* optimization history: the objective per trial, the best so far, pruned trials at the
  objective they had measured when cut (or at zero when cut before it), refused/failed
  trials at zero;
* parameter importances over the measured feasible configurations and the pruned trials
  (by what they measured), two ways: each parameter's share of the variance of log(tok/s)
  in an additive model of the study (a fANOVA of main effects: the settings that cut
  throughput several-fold rank high), and PED-ANOVA's importance for reaching the top 10%
  (what separates the best); or a sentence saying why there are too few;
* intermediate values: one panel (and axis) per level, and where pruning cut;
* single-stream versus peak (the Pareto front), labelled by layout, which is where the
  TP-versus-EP trade-off shows: TP layouts win at one stream, EP layouts at peak;
* tok/s, TTFT p99 and ITL p50 against concurrency for the top five configurations: the
  finalists' measurements of every level of the target workload, averaged over their
  launches, then the best of the others at their screening levels (a simulated study adds
  the simulator's noise-free sweep of each, dotted);
* failures by class, with counts and reasons.

``render_markdown`` gives the tables alone, for a pull request or a chat.
"""

from __future__ import annotations

import optuna

from tuner.report.data import (
    FIGURES,
    Importances,
    ReportData,
    failure_rows,
    importances,
    layout_label,
    pareto_front,
)
from tuner.report.page import render_html
from tuner.report.tables import render_markdown


def build_report(study: optuna.Study, fmt: str = "html") -> str:
    """The report of ``study`` as text: ``html`` (self-contained page) or ``md`` (tables)."""
    data = ReportData.of(study)
    if fmt == "md":
        return render_markdown(data)
    if fmt == "html":
        return render_html(data)
    raise ValueError(f"unknown report format {fmt!r} (html or md)")


__all__ = [
    "FIGURES",
    "Importances",
    "ReportData",
    "build_report",
    "failure_rows",
    "importances",
    "layout_label",
    "pareto_front",
    "render_html",
    "render_markdown",
]
