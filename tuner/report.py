"""A study as one self-contained report: an HTML page that opens offline, or Markdown tables.

The HTML file carries plotly.js once (inline) and every figure as a ``div`` that draws
itself with it, so it can be mailed, attached to a ticket or opened on a machine with
no network. What it shows, all from the trials' user attributes (the study's whole
state, see :mod:`tuner.study`):

* a summary of the study and the winning command;
* the top configurations (distinct configurations; reused trials are copies) with
  what each changes relative to the winner;
* optimization history: the objective per trial, the best so far, pruned trials at the
  last level they reached, refused/failed trials at zero;
* parameter importances (PED-ANOVA, Optuna's default evaluator: deterministic, and it
  handles the conditional parameters of a space; the seeded fANOVA evaluator needs
  scikit-learn) over the measured feasible configurations, or a sentence saying why
  there are too few;
* intermediate values: each trial's value at each level, and where pruning cut;
* single-stream versus peak (the Pareto front), labelled by layout, which is where the
  TP-versus-EP trade-off shows: TP layouts win at one stream, EP layouts at peak;
* tok/s against concurrency for the top five configurations;
* failures by class, with counts and reasons.

``render_markdown`` gives the tables alone, for a pull request or a chat.
"""

from __future__ import annotations

import html
import math
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from tuner import estimates
from tuner.estimates import Estimate
from tuner.study import TrialRecord

#: Configurations in the top table, and curves in the concurrency figure.
TOP_N = 10
CURVES_N = 5
#: Fewer measured configurations than this: no importance figure (the ranking is noise).
MIN_IMPORTANCE_CONFIGS = 4
#: Objects of the report's figures, in page order: (id, title).
FIGURES = (
    ("history", "Optimization history"),
    ("importance", "Parameter importances"),
    ("intermediate", "Intermediate values (per level) and where pruning cut"),
    ("pareto", "Single-stream vs peak: the Pareto front"),
    ("curves", "Throughput vs concurrency, top configurations"),
)


# --------------------------------------------------------------------------- the data


def _option(argv: Sequence[str], *names: str) -> str | None:
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag in names:
            if eq:
                return value
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                return argv[i + 1]
            return ""
    return None


def _int(text: str | None, default: int = 1) -> int:
    try:
        return int(text) if text not in (None, "") else default
    except ValueError:
        return default


def layout_label(argv: Sequence[str]) -> str:
    """A short name of a launch's parallel layout: ``TP8``, ``TP8 EP8``, ``TP4 PP2``,
    ``PP8 EP8 EPLB``, ``TP8 EP8 DeepEP``."""
    tp = _int(_option(argv, "--tp-size", "--tp", "--tensor-parallel-size"))
    pp = _int(_option(argv, "--pp-size", "--pipeline-parallel-size"))
    ep = _int(_option(argv, "--ep-size", "--ep", "--expert-parallel-size"))
    dp = _int(_option(argv, "--dp-size", "--dp", "--data-parallel-size"))
    parts = []
    if tp > 1 or pp == 1:
        parts.append(f"TP{tp}")
    if pp > 1:
        parts.append(f"PP{pp}")
    if ep > 1:
        parts.append(f"EP{ep}")
    if dp > 1:
        parts.append(f"DP{dp}")
    if _option(argv, "--enable-eplb") is not None:
        parts.append("EPLB")
    if (_option(argv, "--moe-a2a-backend") or "").lower() == "deepep":
        parts.append("DeepEP")
    return " ".join(parts)


@dataclass
class TrialView:
    """What the report needs of one trial."""

    number: int
    state: str
    outcome: str
    value: float | None
    values: list[float] | None
    params: dict[str, Any]
    attrs: dict[str, Any]
    intermediate: dict[int, float]
    feasible: bool
    single: float | None
    peak: float | None
    peak_c: int | None
    layout: str
    distributions: dict[str, Any] = field(repr=False, default_factory=dict)
    fail_reason: str | None = None

    @classmethod
    def of(cls, t: FrozenTrial) -> TrialView:
        rec = TrialRecord.of(t)
        levels = rec.attrs.get("levels", [])
        single = next((lv["output_tok_s"] for lv in levels if lv.get("concurrency") == 1), None)
        multi = [lv for lv in levels if lv.get("concurrency", 0) > 1]
        top = max(multi, key=lambda lv: lv["output_tok_s"]) if multi else None
        return cls(
            number=t.number,
            state=t.state.name,
            outcome=rec.outcome,
            value=rec.values[-1] if rec.values else None,
            values=rec.values,
            params=rec.params,
            attrs=rec.attrs,
            intermediate=dict(sorted(t.intermediate_values.items())),
            feasible=rec.feasible,
            single=single,
            peak=top["output_tok_s"] if top else None,
            peak_c=top["concurrency"] if top else None,
            layout=layout_label(rec.attrs.get("flags", [])),
            distributions=dict(t.distributions),
            fail_reason=t.system_attrs.get("fail_reason"),
        )

    @property
    def levels(self) -> list[dict[str, Any]]:
        return list(self.attrs.get("levels", []))

    @property
    def measured(self) -> bool:
        """Its own server ran the whole sweep (not a copy, not cut short)."""
        return self.outcome == "complete" and bool(self.levels)


@dataclass
class ReportData:
    """A study, read once, in the shape the report's parts use."""

    study_name: str
    objective: str
    multi: bool
    space: str
    engine: str
    metric_names: list[str]
    trials: list[TrialView]
    best: TrialView | None
    generated: str
    #: Every launch of each feasible configuration, by config_key (see tuner.estimates).
    estimates: dict[str, Estimate] = field(default_factory=dict)

    @classmethod
    def of(cls, study: optuna.Study) -> ReportData:
        frozen = study.get_trials(deepcopy=False)
        trials = [TrialView.of(t) for t in frozen]
        ev = estimates.evidence(frozen)
        leader = ev.leader()
        best = next((t for t in trials if leader and t.number == leader.trial.number), None)
        attrs = study.user_attrs
        objective = attrs.get("objective", {})
        name = objective.get("name", "peak") if isinstance(objective, Mapping) else str(objective)
        return cls(
            study_name=study.study_name,
            objective=name,
            multi=len(study.directions) > 1,
            space=str(attrs.get("space", "?")),
            engine=str(attrs.get("engine", "?")),
            metric_names=list(study.metric_names or []),
            trials=trials,
            best=best,
            generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            estimates={e.key: e for e in ev.estimates},
        )

    def launches(self, t: TrialView) -> Estimate | None:
        """All launches of ``t``'s configuration (None if it never met its constraints)."""
        return self.estimates.get(str(t.attrs.get("config_key")))

    def config_value(self, t: TrialView) -> float:
        """The configuration's estimated value (its launches pooled with the study's, see
        :mod:`tuner.estimates`); the trial's own value without one."""
        e = self.launches(t)
        return e.value if e is not None else (t.value or 0.0)

    def configs(self, *, feasible_only: bool = True) -> list[TrialView]:
        """Distinct measured configurations (reused trials are copies), best estimate first."""
        seen: set[str] = set()
        out: list[TrialView] = []
        for t in sorted(self.trials, key=lambda t: (-self.config_value(t), t.number)):
            if not t.measured or (feasible_only and not t.feasible):
                continue
            key = str(t.attrs.get("config_key", t.number))
            if key in seen:
                continue
            seen.add(key)
            out.append(t)
        return out

    def outcome_counts(self) -> dict[str, int]:
        counts = Counter("error" if t.outcome == "fail" else t.outcome for t in self.trials)
        return dict(sorted(counts.items()))


def param_differences(params: Mapping[str, Any], winner: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(name, value, winner's value)`` for each parameter that differs (None: not set)."""
    names = list(winner) + [k for k in params if k not in winner]
    return [(k, params.get(k), winner.get(k)) for k in names if params.get(k) != winner.get(k)]


def _fmt_param(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def differences_text(t: TrialView, winner: TrialView | None) -> str:
    if winner is None:
        return ""
    if t.number == winner.number:
        return "(winner)"
    diffs = param_differences(t.params, winner.params)
    if not diffs:
        return "(same parameters)"
    return ", ".join(f"{k}={_fmt_param(v)} (winner {_fmt_param(w)})" for k, v, w in diffs)


def importances(data: ReportData) -> tuple[dict[str, float], str]:
    """Parameter importances over the measured feasible configurations, and a sentence
    on what they are based on (or why there are none)."""
    configs = data.configs()
    if len(configs) < MIN_IMPORTANCE_CONFIGS:
        return {}, (
            f"Not enough measured configurations for parameter importances: {len(configs)} "
            f"(at least {MIN_IMPORTANCE_CONFIGS} needed)."
        )
    study = optuna.create_study(direction="maximize")
    for t in configs:
        if t.value is None or not math.isfinite(t.value):
            continue
        study.add_trial(
            optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=t.value)
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator()
            )
    except Exception as exc:  # too little variation, a distribution it cannot read...
        return {}, f"Parameter importances could not be computed: {exc}"
    what = "peak tok/s" if data.multi else f"the {data.objective} objective"
    return dict(result), (
        f"PED-ANOVA importances of {what} over {len(configs)} measured feasible configurations"
        + (" (few: read as a hint)." if len(configs) < 10 else ".")
    )


def failure_rows(data: ReportData) -> list[tuple[str, list[int], list[tuple[str, int]]]]:
    """``(class, trial numbers, [(reason, count)...])`` of everything that did not give a
    feasible measurement, most frequent class first."""
    groups: dict[str, list[TrialView]] = defaultdict(list)
    for t in data.trials:
        reason = str(t.attrs.get("reason", "")).strip()
        if t.outcome == "failed":
            groups[f"failed: {t.attrs.get('failure_class', 'unknown')}"].append(t)
        elif t.outcome == "infeasible":
            prefix = reason.split(":", 1)[0].strip() if ":" in reason else "rules"
            groups[f"infeasible: {prefix}"].append(t)
        elif t.outcome == "pruned":
            groups["pruned"].append(t)
        elif t.attrs.get("violations"):
            groups["constraint: " + ", ".join(sorted(t.attrs["violations"]))].append(t)
        elif t.state == "FAIL":
            groups["error"].append(t)
    rows = []
    for cls, ts in groups.items():
        reasons = Counter(
            _one_line(str(t.attrs.get("reason") or t.fail_reason or t.outcome))[:200] for t in ts
        )
        rows.append((cls, [t.number for t in ts], reasons.most_common()))
    rows.sort(key=lambda r: (-len(r[1]), r[0]))
    return rows


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _numbers(ns: Sequence[int], limit: int = 12) -> str:
    shown = ", ".join(f"#{n}" for n in ns[:limit])
    return shown + (f" and {len(ns) - limit} more" if len(ns) > limit else "")


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (both maximised),
    in order of the first coordinate."""
    idx = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (x2 >= x and y2 >= y) and (x2 > x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i
        )
        if not dominated:
            idx.append(i)
    return sorted(idx, key=lambda i: points[i][0])


# --------------------------------------------------------------------------- tables


def summary_rows(data: ReportData) -> list[tuple[str, str]]:
    counts = data.outcome_counts()
    server_s = sum(float(t.attrs.get("server_s", 0.0) or 0.0) for t in data.trials)
    rows = [
        ("study", data.study_name),
        ("space", data.space),
        ("objective", data.objective + (" (single-stream and peak)" if data.multi else "")),
        ("trials", f"{len(data.trials)}: " + ", ".join(f"{v} {k}" for k, v in counts.items())),
        ("server time", f"{server_s / 3600:.1f} h"),
    ]
    b = data.best
    if b is not None:
        peak = f"{b.peak:.1f} tok/s at C={b.peak_c}" if b.peak is not None else "-"
        single = f"{b.single:.1f} tok/s" if b.single is not None else "-"
        e = data.launches(b)
        runs = f"; mean of {e.runs} launches {e.mean:.1f} tok/s" if e is not None and e.runs > 1 else ""
        if e is not None:
            runs += f"; estimate {e.value:.1f} tok/s"
        rows.append(("winner", f"trial #{b.number} ({b.layout}): peak {peak}, single-stream {single}{runs}"))
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
    "layout",
    "differs from winner",
)


def top_rows(data: ReportData, n: int = TOP_N) -> list[tuple[str, ...]]:
    rows = []
    for rank, t in enumerate(data.configs()[:n], 1):
        rows.append(
            (
                str(rank),
                f"#{t.number}",
                _num(data.config_value(t)),
                _num(t.single),
                _num(t.peak),
                str(t.peak_c or "-"),
                t.layout,
                differences_text(t, data.best),
            )
        )
    return rows


def curve_rows(data: ReportData, n: int = CURVES_N) -> tuple[list[str], list[list[str]]]:
    """Per-level tok/s of the top ``n`` configurations: header and rows."""
    top = data.configs()[:n]
    cs = sorted({lv["concurrency"] for t in top for lv in t.levels})
    rows = []
    for t in top:
        by_c = {lv["concurrency"]: lv["output_tok_s"] for lv in t.levels}
        rows.append([f"#{t.number}", t.layout] + [_num(by_c.get(c)) for c in cs])
    return ["trial", "layout"] + [f"C={c}" for c in cs], rows


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
        out += ["", "Winning command:", "", "```", _command(data.best), "```"]
    out += ["", "### Top configurations", ""]
    rows = top_rows(data)
    out += md_table(TOP_HEADER, rows) if rows else ["No feasible measured configuration yet."]
    header, crow = curve_rows(data)
    if crow:
        out += ["", f"### Throughput per level (tok/s), top {len(crow)}", ""]
        out += md_table(header, crow)
    imp, note = importances(data)
    out += ["", "### Parameter importances", "", note]
    if imp:
        out += ["", *md_table(("parameter", "importance"), [(k, f"{v:.3f}") for k, v in imp.items()])]
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


def _command(t: TrialView) -> str:
    env = " ".join(f"{k}={v}" for k, v in t.attrs.get("env", {}).items())
    return (env + " " if env else "") + " ".join(t.attrs.get("flags", []))


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
        if t.outcome in ("complete", "reused") and t.value is not None:
            kind = "violated" if t.attrs.get("violations") else t.outcome
            groups[kind].append((t.number, t.value, f"#{t.number} {t.layout}: {t.value:.0f} tok/s"))
        elif t.outcome == "pruned" and t.intermediate:
            step, v = list(t.intermediate.items())[-1]
            groups["pruned"].append(
                (t.number, v, f"#{t.number} pruned after level {step + 1}: {v:.0f} tok/s")
            )
        elif t.state in ("COMPLETE", "FAIL", "PRUNED"):
            groups["refused"].append((t.number, 0.0, f"#{t.number} {t.attrs.get('reason', t.outcome)}"[:120]))
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
        if t.feasible and t.value is not None:
            best = t.value if best is None else max(best, t.value)
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
                text=[f"#{t.number} {t.layout}" for _ in steps],
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
    by_family: dict[str, list[TrialView]] = defaultdict(list)
    for t in feasible:
        by_family["EP layouts" if " EP" in f" {t.layout}" else "TP/PP without EP"].append(t)
    for family, ts in sorted(by_family.items()):
        fig.add_trace(
            go.Scatter(
                x=[t.single for t in ts],
                y=[t.peak for t in ts],
                mode="markers",
                name=family,
                text=[f"#{t.number} {t.layout}" for t in ts],
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
                text=[f"#{t.number} {t.layout}" for t in bad],
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
                text=[f"#{t.number} {t.layout}" for t in front],
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
                name=f"#{t.number} {t.layout} ({_num(t.value, '.0f')})",
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


# --------------------------------------------------------------------------- HTML

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; padding: .7rem; overflow-x: auto; font-size: .85rem; }
p.caption { color: #555; font-size: .9rem; } nav a { margin-right: 1rem; }
"""


def _html_table(
    header: Sequence[str] | None, rows: Iterable[Sequence[Any]], numeric: Iterable[int] = ()
) -> str:
    num = set(numeric)
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header) + "</tr>")
    for row in rows:
        cells = "".join(
            f'<td class="num">{html.escape(str(c))}</td>' if i in num else f"<td>{html.escape(str(c))}</td>"
            for i, c in enumerate(row)
        )
        out.append(f"<tr>{cells}</tr>")
    out.append("</table>")
    return "\n".join(out)


def render_html(data: ReportData) -> str:
    """The whole report as one HTML document with plotly.js inline (once)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:  # plotly is an optional dependency
        raise RuntimeError(
            "the HTML report needs plotly: pip install plotly (a dependency of tuner)"
        ) from exc

    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tuner report: {e(data.study_name)}</title>",
        f"<style>{_CSS}</style>",
        # plotly.js, inline, exactly once: every figure below draws with it, offline.
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body>",
        f"<h1>tuner report: {e(data.study_name)}</h1>",
        "<nav>"
        + "".join(
            f'<a href="#{i}">{e(t)}</a>'
            for i, t in [
                ("summary", "Summary"),
                ("top", "Top configurations"),
                *FIGURES,
                ("failures", "Failures"),
            ]
        )
        + "</nav>",
        '<h2 id="summary">Summary</h2>',
        _html_table(None, summary_rows(data)),
    ]
    if data.best is not None:
        parts.append(
            f"<p>Winning command (trial #{data.best.number}):</p><pre>{e(_command(data.best))}</pre>"
        )
    parts.append('<h2 id="top">Top configurations</h2>')
    rows = top_rows(data)
    parts.append(
        _html_table(TOP_HEADER, rows, numeric=(0, 2, 3, 4, 5))
        if rows
        else "<p>No feasible measured configuration yet.</p>"
    )
    header, crow = curve_rows(data)
    if crow:
        parts.append(f"<p>Throughput per level (tok/s), top {len(crow)}:</p>")
        parts.append(_html_table(header, crow, numeric=range(2, len(header))))
    config = {"displaylogo": False, "responsive": True}
    figs = figures(data)
    for fig_id, title in FIGURES:
        fig, caption = figs[fig_id]
        parts.append(f'<h2 id="{fig_id}">{e(title)}</h2>')
        parts.append(f'<p class="caption">{e(caption)}</p>')
        if fig is not None:
            parts.append(
                fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{fig_id}", config=config)
            )
    parts.append('<h2 id="failures">Failures by class</h2>')
    frows = failure_rows(data)
    if frows:
        parts.append(
            _html_table(
                ("class", "count", "trials", "reasons"),
                [
                    (c, len(ns), _numbers(ns), "; ".join(f"{r} (x{k})" for r, k in rs[:5]))
                    for c, ns, rs in frows
                ],
                numeric=(1,),
            )
        )
    else:
        parts.append("<p>None: every trial gave a feasible measurement.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


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
    "ReportData",
    "TrialView",
    "build_report",
    "failure_rows",
    "importances",
    "layout_label",
    "pareto_front",
    "render_html",
    "render_markdown",
]
