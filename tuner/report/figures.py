"""The report's plotly figures, each with its caption."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tuner import trial_record
from tuner.report.data import (
    CURVE_LEVELS,
    TOP_QUANTILE,
    Curve,
    Importances,
    ReportData,
    importance_points,
    importances,
    layout_label,
    pareto_front,
    value_labels,
)
from tuner.trial_record import TrialRecord
from tuner.wording import fmt_value

# --------------------------------------------------------------------------- figures

_COLORS = {
    "pruned_early": "#f4a6a6",
    "complete": "#1f77b4",
    "reused": "#9ecae1",
    "violated": "#ff7f0e",
    "pruned": "#d62728",
    "refused": "#7f7f7f",
}
_LAYOUT: dict[str, Any] = {
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
            # On the objective's axis only what measures the objective: the partial value (a
            # lower bound); a trial cut before those levels sits on the floor with the refused.
            step, v = list(t.intermediate.items())[-1]
            partial = t.attrs.get(trial_record.PARTIAL_VALUE)
            if partial is not None:
                groups["pruned"].append(
                    (
                        t.number,
                        float(partial),
                        f"#{t.number} pruned after level {step + 1}: at least {partial:.0f}",
                    )
                )
            else:
                groups["pruned_early"].append(
                    (t.number, 0.0, f"#{t.number} pruned at level {step + 1} ({v:.0f} tok/s there)")
                )
        elif t.state in ("COMPLETE", "FAIL", "PRUNED"):
            groups["refused"].append(
                (t.number, 0.0, f"#{t.number} {t.outcome if t.reason is None else t.reason}"[:120])
            )
    names = {
        "complete": "measured",
        "reused": "reused (copy)",
        "violated": "violates constraints",
        "pruned": "pruned (the objective so far: a lower bound)",
        "pruned_early": "pruned before the objective was measured (at 0)",
        "refused": "refused / failed: nothing measured (at 0)",
    }
    symbols = {"pruned": "x", "pruned_early": "x", "refused": "x-thin-open", "reused": "circle-open"}
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
    xs: list[int] = []
    ys: list[float] = []
    best: float | None = None
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


def importance_figure(imp: Importances, top: int | None = None) -> Any:
    """Two bars per parameter, most important (by variance share) on top: its share of the
    variance of log(tok/s), and PED-ANOVA's importance for reaching the top (the ``top``
    most important parameters only, when given)."""
    import plotly.graph_objects as go

    names = list(reversed(imp.ranked()[:top]))
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=[imp.variance[k] for k in names],
            y=names,
            orientation="h",
            name="share of the variance of log(tok/s): what a setting does across the space",
            marker={"color": "#1f77b4"},
        )
    )
    if imp.top:
        fig.add_trace(
            go.Bar(
                x=[imp.top.get(k, 0.0) for k in names],
                y=names,
                orientation="h",
                name=f"PED-ANOVA, top {TOP_QUANTILE:.0%}: what separates the best",
                marker={"color": "#ff7f0e"},
            )
        )
    layout = {**_LAYOUT, "height": max(320, 40 * len(names) + 120)}
    fig.update_layout(**layout, barmode="group", xaxis_title="importance (each sums to 1)")
    fig.update_yaxes(automargin=True)
    return fig


def _label_order(label: str, values: Sequence[Any]) -> tuple[int, float, str]:
    """Sort key of a heatmap axis label: unset first, then numbers by value, then words."""
    if label == fmt_value(None):
        return (0, 0.0, "")
    nums = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return (1, min(nums), "") if nums else (2, 0.0, label)


def pair_figure(data: ReportData, imp: Importances) -> Any | None:
    """The two most important parameters (:meth:`Importances.ranked`) against each other: the
    best tok/s measured in each pair of their values, over the same points as the
    importances (pruned trials by what they measured), with the count of points in each
    cell. What optuna-dashboard's contour plot would show had it started on these two (it
    starts on the first two names in alphabetical order). None with fewer than two."""
    import plotly.graph_objects as go

    if len(imp.variance) < 2:
        return None
    a, b = imp.ranked()[:2]
    points, _ = importance_points(data)
    labels = value_labels(points)

    def label(t: TrialRecord, name: str) -> str:
        v = t.params.get(name)
        return labels.get(name, {}).get(v, fmt_value(v))

    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    raw: dict[str, dict[str, list[Any]]] = {a: defaultdict(list), b: defaultdict(list)}
    for t, value in points:
        x, y = label(t, a), label(t, b)
        cells[(x, y)].append(value)
        raw[a][x].append(t.params.get(a))
        raw[b][y].append(t.params.get(b))
    xs = sorted(raw[a], key=lambda k: _label_order(k, raw[a][k]))
    ys = sorted(raw[b], key=lambda k: _label_order(k, raw[b][k]))
    z = [[max(cells[(x, y)]) if (x, y) in cells else None for x in xs] for y in ys]
    text = [
        [f"{max(cells[(x, y)]):.0f} ({len(cells[(x, y)])})" if (x, y) in cells else "" for x in xs]
        for y in ys
    ]
    fig = go.Figure(
        go.Heatmap(
            x=xs,
            y=ys,
            z=z,
            text=text,
            texttemplate="%{text}",
            colorscale="Viridis",
            zmin=0,
            colorbar={"title": {"text": "best tok/s"}},
            hovertemplate=f"{a}=%{{x}}<br>{b}=%{{y}}<br>best %{{z:.0f}} tok/s<extra></extra>",
        )
    )
    layout = {**_LAYOUT, "margin": {**_LAYOUT["margin"], "t": 50}}
    fig.update_layout(
        **layout,
        title={"text": f"Best tok/s by {a} and {b}", "x": 0.01},
        xaxis={"title": a, "type": "category"},
        yaxis={"title": b, "type": "category"},
    )
    return fig


def intermediate_figure(data: ReportData) -> Any:
    """One panel per level, each with its own axis (C=1 tok/s and peak tok/s differ by 30x):
    the value every trial reported there, pruned trials marked where they were cut."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = _level_names(data)
    fig = make_subplots(
        rows=1, cols=max(1, len(names)), subplot_titles=[f"C={c}" for c in names.values()] or None
    )
    shown: set[str] = set()
    for step in names:
        for kind in ("complete", "pruned"):
            pts = [
                t
                for t in data.trials
                if step in t.intermediate
                and t.outcome != "reused"
                and (t.outcome == "pruned") == (kind == "pruned")
            ]
            if not pts:
                continue
            cut = [kind == "pruned" and max(t.intermediate) == step for t in pts]
            fig.add_trace(
                go.Scatter(
                    x=[t.number for t in pts],
                    y=[t.intermediate[step] for t in pts],
                    mode="markers",
                    name="pruned (x: the level where it was cut)"
                    if kind == "pruned"
                    else "measured all levels",
                    legendgroup=kind,
                    showlegend=kind not in shown,
                    marker={
                        "color": _COLORS[kind],
                        "symbol": ["x" if c else "circle" for c in cut],
                        "size": [11 if c else 7 for c in cut],
                    },
                    text=[f"#{t.number} {layout_label(t.argv)}" for t in pts],
                    hovertemplate="%{text}: %{y:.0f} tok/s<extra></extra>",
                ),
                row=1,
                col=step + 1,
            )
            shown.add(kind)
        fig.update_xaxes(title_text="trial", row=1, col=step + 1)
        fig.update_yaxes(title_text="tok/s" if step == 0 else None, rangemode="tozero", row=1, col=step + 1)
    fig.update_layout(**{**_LAYOUT, "margin": {**_LAYOUT["margin"], "t": 60}})
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


def _log_c_axis(cs: set[int]) -> dict[str, Any]:
    ticks = sorted(cs)
    return {"type": "log", "tickvals": ticks, "ticktext": [str(c) for c in ticks]}


#: One color per top configuration, shared by the throughput and latency figures.
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")


#: Legend entry of the simulator's sweeps (one entry toggles them all).
_SIM_NAME = "dotted: the simulator's sweep of each (noise off)"


def _curve_name(c: Curve) -> str:
    """``#12 TP8 EP8, target launches #30, #38`` / ``#12 TP8, screening levels only``."""
    return f"#{c.trial.number} {layout_label(c.trial.argv)}, {c.measured_on()}"


def curves_figure(data: ReportData) -> Any:
    """Aggregate tok/s against concurrency of :attr:`ReportData.curves`: each configuration's
    mean over its target launches (error bars: the lowest and highest launch where it has
    several), and the simulator's noise-free sweep dotted (simulated studies)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    cs: set[int] = set()
    for i, c in enumerate(data.curves):
        color, name = _PALETTE[i % len(_PALETTE)], _curve_name(c)
        cs.update(lv["concurrency"] for lv in c.levels)
        spread = len(c.launches) > 1
        fig.add_trace(
            go.Scatter(
                x=[lv["concurrency"] for lv in c.levels],
                y=[lv["output_tok_s"] for lv in c.levels],
                mode="lines+markers" if c.target else "markers",
                name=name,
                legendgroup=name,
                line={"color": color},
                marker={"color": color, "size": 8},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [lv["tok_s_max"] - lv["output_tok_s"] for lv in c.levels],
                    "arrayminus": [lv["output_tok_s"] - lv["tok_s_min"] for lv in c.levels],
                    "visible": spread,
                    "color": color,
                },
                hovertemplate=f"#{c.trial.number}: C=%{{x}} %{{y:.0f}} tok/s<extra></extra>",
            )
        )
        if c.simulated:
            cs.update(lv["concurrency"] for lv in c.simulated)
            fig.add_trace(
                go.Scatter(
                    x=[lv["concurrency"] for lv in c.simulated],
                    y=[lv["output_tok_s"] for lv in c.simulated],
                    mode="lines",
                    name=_SIM_NAME,
                    legendgroup=_SIM_NAME,
                    showlegend=i == 0,
                    line={"color": color, "dash": "dot", "width": 1},
                    hovertemplate=f"#{c.trial.number} simulator: C=%{{x}} %{{y:.0f}} tok/s<extra></extra>",
                )
            )
    fig.update_layout(
        **_LAYOUT,
        xaxis={"title": "concurrency", **_log_c_axis(cs)},
        yaxis={"title": "aggregate output tok/s", "rangemode": "tozero"},
    )
    return fig


def latency_figure(data: ReportData) -> Any:
    """TTFT p99 and ITL p50 against concurrency of :attr:`ReportData.curves` (two panels), the
    same measurements (and simulator sweeps) as :func:`curves_figure`."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=["TTFT p99 (s)", "ITL p50 (ms)"])
    cs: set[int] = set()
    for i, c in enumerate(data.curves):
        color, name = _PALETTE[i % len(_PALETTE)], _curve_name(c)
        for col, key in ((1, "ttft_s_p99"), (2, "itl_ms_p50")):
            for levels, simulated in ((c.levels, False), (c.simulated or [], True)):
                pts = [x for x in levels if x.get(key) is not None]
                if not pts:
                    continue
                cs.update(x["concurrency"] for x in pts)
                fig.add_trace(
                    go.Scatter(
                        x=[x["concurrency"] for x in pts],
                        y=[x[key] for x in pts],
                        mode="lines" if simulated else "lines+markers" if c.target else "markers",
                        name=_SIM_NAME if simulated else name,
                        legendgroup=_SIM_NAME if simulated else name,
                        showlegend=col == 1 and (not simulated or i == 0),
                        line={
                            "color": color,
                            "dash": "dot" if simulated else "solid",
                            "width": 1 if simulated else 2,
                        },
                        marker={"color": color},
                    ),
                    row=1,
                    col=col,
                )
    for col in (1, 2):
        fig.update_xaxes(title_text="concurrency", **_log_c_axis(cs), row=1, col=col)
        fig.update_yaxes(rangemode="tozero", row=1, col=col)
    fig.update_layout(**{**_LAYOUT, "margin": {**_LAYOUT["margin"], "t": 60}})
    return fig


def figures(data: ReportData) -> dict[str, tuple[Any | None, str]]:
    """Each figure of :data:`FIGURES` by id: (plotly figure or None, caption)."""
    out: dict[str, tuple[Any | None, str]] = {}
    out["history"] = (
        history_figure(data) if data.trials else None,
        "Objective per trial (pareto studies: peak) and the best feasible so far; a pruned trial at the "
        "objective it had measured when cut (a lower bound), or at 0 when cut before."
        if data.trials
        else "No trials yet.",
    )
    imp = importances(data)
    out["importance"] = (importance_figure(imp) if imp.variance else None, imp.note)
    pair = pair_figure(data, imp)
    out["pair"] = (
        pair,
        "The best tok/s measured in each pair of values of the two most important parameters (a pruned "
        "trial by what it measured), and how many configurations each cell holds; a many-valued number "
        "is grouped into ranges."
        if pair is not None
        else "Fewer than two parameters ranked: no pair to show.",
    )
    if any(t.intermediate for t in data.trials):
        out["intermediate"] = (
            intermediate_figure(data),
            "The value each trial reported at each level, one panel (and axis) per level; x marks the level "
            "where a pruned trial was cut.",
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
    shown = data.curves
    finalists = sum(c.target for c in shown)
    what = (
        f"Lines: the top {finalists} configuration(s) measured on every level of the target workload "
        "(the finalists), each the mean of its target launches (error bars: lowest and highest launch)."
        if finalists
        else "No configuration was measured on the whole target workload yet."
    )
    if finalists < len(shown):
        what += (
            f" Points only: the best {len(shown) - finalists} other configuration(s), at the levels they "
            "were screened on."
        )
    if any(c.simulated for c in shown):
        what += (
            f" Dotted: the simulator's noise-free sweep of each over C={','.join(map(str, CURVE_LEVELS))} "
            "(the study is simulated)."
        )
    out["curves"] = (
        curves_figure(data) if shown else None,
        f"Aggregate tok/s against concurrency. {what}"
        if shown
        else "No feasible measured configuration yet.",
    )
    has_latency = any(
        lv.get("ttft_s_p99") is not None for c in shown for lv in [*c.levels, *(c.simulated or [])]
    )
    out["latency"] = (
        latency_figure(data) if has_latency else None,
        "What one user waits for at each level: time to first token (p99) and inter-token latency "
        f"(p50). {what}"
        if has_latency
        else "No feasible measured configuration with latency figures yet.",
    )
    return out
