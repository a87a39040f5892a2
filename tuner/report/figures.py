"""The report's plotly figures, each with its caption."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from tuner.report.data import CURVES_N, ReportData, importances, layout_label, pareto_front
from tuner.report.tables import _num
from tuner.trial_record import TrialRecord

# --------------------------------------------------------------------------- figures

_COLORS = {
    "complete": "#1f77b4",
    "reused": "#9ecae1",
    "violated": "#ff7f0e",
    "pruned": "#d62728",
    "refused": "#7f7f7f",
}
_LAYOUT = {
    "template": "plotly_white",
    "height": 420,
    "margin": {"l": 60, "r": 20, "t": 30, "b": 50},
    "legend": {"orientation": "h", "y": -0.18},
}


def _level_names(data: ReportData) -> dict[int, int]:
    """Step index -> concurrency, from the longest sweep in the study."""
    longest = max((t.levels for t in data.trials), key=len, default=[])
    return {i: lv["concurrency"] for i, lv in enumerate(longest)}


def history_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    groups: dict[str, list[tuple[int, float, str]]] = defaultdict(list)
    for t in data.trials:
        value = t.final_value
        if t.outcome in ("complete", "reused") and value is not None:
            kind = "violated" if t.violations else t.outcome
            groups[kind].append((t.number, value, f"#{t.number} {layout_label(t.argv)}: {value:.0f} tok/s"))
        elif t.outcome == "pruned" and t.intermediate:
            step, v = list(t.intermediate.items())[-1]
            groups["pruned"].append(
                (t.number, v, f"#{t.number} pruned after level {step + 1}: {v:.0f} tok/s")
            )
        elif t.state in ("COMPLETE", "FAIL", "PRUNED"):
            groups["refused"].append(
                (t.number, 0.0, f"#{t.number} {t.outcome if t.reason is None else t.reason}"[:120])
            )
    names = {
        "complete": "measured",
        "reused": "reused (copy)",
        "violated": "violates constraints",
        "pruned": "pruned (value at its last level)",
        "refused": "infeasible / failed (0)",
    }
    symbols = {"pruned": "x", "refused": "x-thin-open", "reused": "circle-open"}
    for kind, pts in groups.items():
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                mode="markers",
                name=names[kind],
                text=[p[2] for p in pts],
                hoverinfo="text",
                marker={"color": _COLORS[kind], "symbol": symbols.get(kind, "circle"), "size": 9},
            )
        )
    xs, ys, best = [], [], None
    for t in sorted(data.trials, key=lambda t: t.number):
        if t.feasible and t.final_value is not None:
            best = t.final_value if best is None else max(best, t.final_value)
        if best is not None:
            xs.append(t.number)
            ys.append(best)
    if xs:
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="best so far", line={"shape": "hv"}))
    metric = "peak tok/s" if data.multi else f"{data.objective} tok/s"
    fig.update_layout(**_LAYOUT, xaxis_title="trial", yaxis_title=metric)
    return fig


def importance_figure(imp: Mapping[str, float]) -> Any:
    import plotly.graph_objects as go

    items = sorted(imp.items(), key=lambda kv: kv[1])
    fig = go.Figure(go.Bar(x=[v for _, v in items], y=[k for k, _ in items], orientation="h"))
    layout = {**_LAYOUT, "height": max(300, 28 * len(items) + 80)}
    fig.update_layout(**layout, xaxis_title="importance (sums to 1)", showlegend=False)
    fig.update_yaxes(automargin=True)
    return fig


def intermediate_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    names = _level_names(data)
    fig = go.Figure()
    shown: set[str] = set()
    for t in data.trials:
        if not t.intermediate or t.outcome == "reused":
            continue
        kind = "pruned" if t.outcome == "pruned" else "complete"
        steps = list(t.intermediate)
        values = list(t.intermediate.values())
        symbols = ["circle"] * len(steps)
        if kind == "pruned":
            symbols[-1] = "x"
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=values,
                mode="lines+markers",
                name="pruned (x: where it was cut)" if kind == "pruned" else "measured all levels",
                legendgroup=kind,
                showlegend=kind not in shown,
                line={"color": _COLORS[kind], "width": 1},
                marker={"symbol": symbols, "size": [7] * (len(steps) - 1) + [11]},
                text=[f"#{t.number} {layout_label(t.argv)}" for _ in steps],
                hovertemplate="%{text}: %{y:.0f} tok/s<extra></extra>",
            )
        )
        shown.add(kind)
    fig.update_layout(
        **_LAYOUT,
        xaxis={
            "title": "level",
            "tickvals": list(names),
            "ticktext": [f"C={c}" for c in names.values()],
        },
        yaxis_title="value reported at the level (tok/s)",
    )
    return fig


def pareto_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    pts = [t for t in data.configs(feasible_only=False) if t.single is not None and t.peak is not None]
    fig = go.Figure()
    feasible = [t for t in pts if t.feasible]
    by_family: dict[str, list[TrialRecord]] = defaultdict(list)
    for t in feasible:
        by_family["EP layouts" if " EP" in f" {layout_label(t.argv)}" else "TP/PP without EP"].append(t)
    for family, ts in sorted(by_family.items()):
        fig.add_trace(
            go.Scatter(
                x=[t.single for t in ts],
                y=[t.peak for t in ts],
                mode="markers",
                name=family,
                text=[f"#{t.number} {layout_label(t.argv)}" for t in ts],
                hovertemplate="%{text}<br>C=1 %{x:.1f} tok/s<br>peak %{y:.0f} tok/s<extra></extra>",
                marker={"size": 9, "symbol": "diamond" if family.startswith("EP") else "circle"},
            )
        )
    bad = [t for t in pts if not t.feasible]
    if bad:
        fig.add_trace(
            go.Scatter(
                x=[t.single for t in bad],
                y=[t.peak for t in bad],
                mode="markers",
                name="violates constraints",
                text=[f"#{t.number} {layout_label(t.argv)}" for t in bad],
                hovertemplate="%{text}<extra></extra>",
                marker={"size": 8, "color": _COLORS["refused"], "symbol": "x"},
            )
        )
    front = [feasible[i] for i in pareto_front([(t.single or 0.0, t.peak or 0.0) for t in feasible])]
    if front:
        fig.add_trace(
            go.Scatter(
                x=[t.single for t in front],
                y=[t.peak for t in front],
                mode="lines+markers+text",
                name="Pareto front",
                text=[f"#{t.number} {layout_label(t.argv)}" for t in front],
                textposition="top center",
                line={"color": "#2ca02c", "dash": "dot"},
                marker={"size": 12, "color": "rgba(0,0,0,0)", "line": {"color": "#2ca02c", "width": 2}},
                hoverinfo="text",
            )
        )
    fig.update_layout(**_LAYOUT, xaxis_title="single-stream tok/s (C=1)", yaxis_title="peak tok/s (C>1)")
    return fig


def curves_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    cs: set[int] = set()
    for t in data.configs()[:CURVES_N]:
        lv = sorted(t.levels, key=lambda lv: lv["concurrency"])
        cs.update(x["concurrency"] for x in lv)
        fig.add_trace(
            go.Scatter(
                x=[x["concurrency"] for x in lv],
                y=[x["output_tok_s"] for x in lv],
                mode="lines+markers",
                name=f"#{t.number} {layout_label(t.argv)} ({_num(t.final_value, '.0f')})",
            )
        )
    ticks = sorted(cs)
    fig.update_layout(
        **_LAYOUT,
        xaxis={"title": "concurrency", "type": "log", "tickvals": ticks, "ticktext": [str(c) for c in ticks]},
        yaxis_title="aggregate output tok/s",
    )
    return fig


def figures(data: ReportData) -> dict[str, tuple[Any | None, str]]:
    """Each figure of :data:`FIGURES` by id: (plotly figure or None, caption)."""
    out: dict[str, tuple[Any | None, str]] = {}
    measured = data.configs()
    out["history"] = (
        history_figure(data) if data.trials else None,
        "Objective per trial (pareto studies: peak) and the best feasible so far."
        if data.trials
        else "No trials yet.",
    )
    imp, note = importances(data)
    out["importance"] = (importance_figure(imp) if imp else None, note)
    if any(t.intermediate for t in data.trials):
        out["intermediate"] = (
            intermediate_figure(data),
            "The value each trial reported after each level; a pruned trial's line ends where it was cut.",
        )
    else:
        out["intermediate"] = (
            None,
            "No intermediate values: multi-objective studies run without pruning."
            if data.multi
            else "No trial reported a level yet.",
        )
    pareto_pts = [t for t in data.configs(feasible_only=False) if t.single is not None and t.peak is not None]
    out["pareto"] = (
        pareto_figure(data) if pareto_pts else None,
        "Each measured configuration's single-stream against its peak; the front is labelled by layout "
        "(TP wins one stream, EP the peak)."
        if pareto_pts
        else "No configuration measured at C=1 and above.",
    )
    out["curves"] = (
        curves_figure(data) if measured else None,
        f"Aggregate tok/s at each level of the top {min(CURVES_N, len(measured))} distinct configurations."
        if measured
        else "No feasible measured configuration yet.",
    )
    return out
