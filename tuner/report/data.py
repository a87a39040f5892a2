"""The report's data: a study read once (:class:`ReportData`), and what is derived from it
(layouts, differences from the winner, importances, failure classes, the Pareto front)."""

from __future__ import annotations

import math
import warnings
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import optuna

from tuner import estimates, trial_record
from tuner.estimates import NOISE_PRIOR, Estimate
from tuner.trial_record import StudyInfo, TrialRecord
from tuner.verdict import Verdict, verdict
from tuner.wording import fmt_value

#: Configurations in the top table, and curves in the concurrency figure.
TOP_N = 10
CURVES_N = 5
#: Fewer measured configurations than this: no importance figure (the ranking is noise).
MIN_IMPORTANCE_CONFIGS = 4
#: The best fraction of the points that PED-ANOVA asks "what sets these apart" about
#: (Optuna's default ``target_quantile``).
TOP_QUANTILE = 0.1
#: A numeric parameter with more distinct values than this is grouped into this many
#: equal-count bins for the additive model of the importances: a value seen once would soak
#: up that launch's noise and look important.
MAX_VALUE_GROUPS = 8
#: Objects of the report's figures, in page order: (id, title).
FIGURES = (
    ("history", "Optimization history"),
    ("importance", "Parameter importances"),
    ("pair", "The two most important parameters"),
    ("intermediate", "Intermediate values (per level) and where pruning cut"),
    ("pareto", "Single-stream vs peak: the Pareto front"),
    ("curves", "Throughput vs concurrency, top configurations"),
    ("latency", "Latency vs concurrency: TTFT and ITL, top configurations"),
)
#: Levels of the simulator's noise-free sweep drawn beside a simulated study's measured
#: curves (the reference campaign's sweep, plus the study's own levels).
CURVE_LEVELS = (1, 8, 16, 32, 64, 128, 192, 256)
#: Metrics of a level that a configuration's curve averages over its target launches (what
#: the throughput and latency figures draw).
CURVE_METRICS = ("output_tok_s", "ttft_s_p50", "ttft_s_p99", "itl_ms_p50", "itl_ms_p99")


@dataclass
class Curve:
    """What the throughput and latency figures draw for one top configuration: its
    measurements of every level of the target workload (the finalists' launches, see
    :data:`tuner.trial_record.FIDELITY`), averaged per level over its launches; or, for a
    configuration no launch measured on the whole target yet, its screening levels only."""

    #: The configuration's representative trial (its best record, as in the top table).
    trial: TrialRecord
    #: Per level, lowest concurrency first: ``concurrency``, the mean of each of
    #: :data:`CURVE_METRICS` over the launches (None where none reported it), and the
    #: lowest and highest ``output_tok_s`` of the launches (``tok_s_min``, ``tok_s_max``).
    levels: list[dict[str, Any]]
    #: The trials whose measurements these are.
    launches: tuple[int, ...]
    #: True: measured on the whole target workload; False: the screening levels only.
    target: bool
    #: The simulator's noise-free sweep over :data:`CURVE_LEVELS` (simulated studies only).
    simulated: list[dict[str, Any]] | None = None

    def measured_on(self) -> str:
        """``target launches #30, #38`` / ``screening levels only``: what the curve rests on."""
        if not self.target:
            return "screening levels only"
        s = "es" if len(self.launches) > 1 else ""
        return f"target launch{s} " + ", ".join(f"#{n}" for n in self.launches)


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
        return int(text) if text else default
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
class ReportData:
    """A study, read once, in the shape the report's parts use."""

    study_name: str
    objective: str
    multi: bool
    space: str
    engine: str
    metric_names: list[str]
    trials: list[TrialRecord]
    best: TrialRecord | None
    generated: str
    #: Every launch of each feasible configuration, by config_key (see tuner.estimates).
    estimates: dict[str, Estimate] = field(default_factory=dict)
    #: The study's own attributes (workload, backend).
    info: StudyInfo | None = None
    #: The winner and how sure that is (see tuner.verdict).
    verdict: Verdict | None = None
    #: The top configurations' throughput and latency against concurrency (see :func:`curves`).
    curves: list[Curve] = field(default_factory=list)
    #: The study's relative run-to-run noise (:func:`tuner.estimates.noise`).
    noise: float = NOISE_PRIOR

    @classmethod
    def of(cls, study: optuna.Study, *, with_curves: bool = True) -> ReportData:
        """The study read once; ``with_curves=False`` leaves :attr:`curves` empty (a reader
        that draws none: no simulator sweep)."""
        frozen = study.get_trials(deepcopy=False)
        trials = [TrialRecord.of(t) for t in frozen]
        info = StudyInfo.of(study.user_attrs)
        ev = estimates.evidence(frozen)
        leader = ev.leader()
        best = next((t for t in trials if leader and t.number == leader.trial.number), None)
        data = cls(
            study_name=study.study_name,
            objective=info.objective,
            multi=len(study.directions) > 1,
            space="?" if info.space is None else str(info.space),
            engine="?" if info.engine is None else str(info.engine),
            metric_names=list(study.metric_names or []),
            trials=trials,
            best=best,
            generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            estimates={e.key: e for e in ev.estimates},
            info=info,
            verdict=verdict(study),
            noise=ev.noise,
        )
        if with_curves:
            data.curves = curves(data)
        return data

    def launches(self, t: TrialRecord) -> Estimate | None:
        """All launches of ``t``'s configuration (None if it never met its constraints)."""
        return self.estimates.get(str(t.config_key))

    def config_value(self, t: TrialRecord) -> float:
        """The configuration's estimated value (its launches pooled with the study's, see
        :mod:`tuner.estimates`); the trial's own value without one."""
        e = self.launches(t)
        return e.value if e is not None else (t.final_value or 0.0)

    def configs(self, *, feasible_only: bool = True) -> list[TrialRecord]:
        """Distinct measured configurations (reused trials are copies), best estimate first."""
        seen: set[str] = set()
        out: list[TrialRecord] = []
        for t in sorted(self.trials, key=lambda t: (-self.config_value(t), t.number)):
            if not t.measured or (feasible_only and not t.feasible):
                continue
            key = str(t.number if t.config_key is None else t.config_key)
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


def differences_text(t: TrialRecord, winner: TrialRecord | None) -> str:
    if winner is None:
        return ""
    if t.number == winner.number:
        return "(winner)"
    diffs = param_differences(t.params, winner.params)
    if not diffs:
        return "(same parameters)"
    return ", ".join(f"{k}={fmt_value(v)} (winner {fmt_value(w)})" for k, v, w in diffs)


def mean_levels(launches: Sequence[TrialRecord]) -> list[dict[str, Any]]:
    """The levels of ``launches`` (measurements of one configuration) averaged per
    concurrency: each of :data:`CURVE_METRICS` (None where no launch reported it), and the
    range of ``output_tok_s`` (``tok_s_min``, ``tok_s_max``). Lowest concurrency first."""
    by_c: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in launches:
        for lv in t.levels:
            if not lv.get("stopped_early"):  # a projection, not a measurement of the curve
                by_c[int(lv["concurrency"])].append(lv)
    out = []
    for c in sorted(by_c):
        row: dict[str, Any] = {"concurrency": c}
        for key in CURVE_METRICS:
            vals = [float(lv[key]) for lv in by_c[c] if lv.get(key) is not None]
            row[key] = sum(vals) / len(vals) if vals else None
        tok = [float(lv["output_tok_s"]) for lv in by_c[c]]
        row["tok_s_min"], row["tok_s_max"] = min(tok), max(tok)
        out.append(row)
    return out


def target_launches(trials: Sequence[TrialRecord]) -> dict[str, list[TrialRecord]]:
    """Each configuration's launches that measured the whole target workload (its own
    server ran every level: copies and cut trials left out), by config_key."""
    out: dict[str, list[TrialRecord]] = defaultdict(list)
    for t in trials:
        if t.fidelity == "target" and t.measured:
            out[str(t.number if t.config_key is None else t.config_key)].append(t)
    return dict(out)


def curves(data: ReportData, n: int = CURVES_N) -> list[Curve]:
    """The top ``n`` configurations for the throughput and latency figures: first those
    measured on the whole target workload (the finalists, best estimate first), each
    averaged over its target launches; then, while there is room, the best of the others
    at the levels they were screened on. Measurements only: a simulated study adds the
    simulator's noise-free sweep of each (:func:`simulated_sweep`); nothing else calls a
    simulator."""
    full = target_launches(data.trials)
    finalists: list[Curve] = []
    screened: list[Curve] = []
    for t in data.configs():
        launches = full.get(str(t.number if t.config_key is None else t.config_key))
        if launches:
            finalists.append(Curve(t, mean_levels(launches), tuple(x.number for x in launches), True))
        elif t.levels:
            screened.append(Curve(t, mean_levels([t]), (t.number,), False))
    out = (finalists + screened)[:n]
    for c in out:
        c.simulated = simulated_sweep(data, c.trial)
    return out


def simulated_sweep(data: ReportData, t: TrialRecord) -> list[dict[str, Any]] | None:
    """``t``'s configuration swept by the simulator over :data:`CURVE_LEVELS` (noise off)
    where the study is simulated, so the figures show the curve between the levels the
    search measured. None for any other study (its numbers are measurements)."""
    backend = data.info.backend if data.info is not None else None
    if not backend or backend.get("kind") != "simulated" or not backend.get("hardware_id"):
        return None
    from tuner.deployment import launch_spec
    from tuner.measurers import SimMeasurer
    from tuner.objectives import Objective
    from tuner.workload import Workload

    try:
        base = Workload(**(data.info.workload or {}))  # type: ignore[union-attr]
        workload = base.model_copy(update={"levels": tuple(sorted({*CURVE_LEVELS, *base.levels}))})
        sim = SimMeasurer(backend["hardware_id"], backend["model_id"], noise=0.0, startup_s=0.0)
        m = sim.measure(
            launch_spec(t, data.info),  # type: ignore[arg-type]
            workload,
            Objective(),
            trial_label="report",
            seed=0,
            on_level=lambda *a: True,
        )
    except Exception:  # an edited profile or workload: the measured points remain
        return None
    return [lv.model_dump() for lv in m.levels] if m.status == "ok" else None


@dataclass
class Importances:
    """How much each parameter matters, two ways, over the same points (see :func:`importances`).

    ``variance``: the share of the variance of log(objective) over the points that each
    parameter's values explain in an additive model of the study (:mod:`tuner.effects`, a
    fANOVA of main effects): a setting that cuts throughput 4-8x (expert load balancing,
    CUDA graphs off) ranks high even when few trials tried it. ``top``: PED-ANOVA's
    importance for reaching the best :data:`TOP_QUANTILE` of the points (Optuna's default
    evaluator): what separates the best configurations from the merely good. Each sums to
    1; empty when there were too few points (``note`` says why).
    """

    variance: dict[str, float]
    top: dict[str, float]
    note: str

    def ranked(self) -> list[str]:
        """Parameter names, most important first (by :attr:`variance`)."""
        return list(self.variance)


def importance_points(data: ReportData) -> tuple[list[tuple[TrialRecord, float]], int]:
    """``(trial, value)`` of each measured feasible configuration (its estimate) and each
    pruned trial, by what it measured (its partial value, a lower bound of the objective,
    or, cut before the objective's levels, the lowest measured value scaled by its single
    stream's ratio to the median); and how many of them are pruned trials."""
    configs = data.configs()
    points = [(t, data.config_value(t)) for t in configs]
    floor = min((v for _, v in points if math.isfinite(v) and v > 0), default=0.0)
    singles = sorted(t.single for t in configs if t.single)
    median_single = singles[len(singles) // 2] if singles else None
    pruned = 0
    for t in data.trials:
        if t.outcome != "pruned" or t.reused_from is not None or not t.distributions:
            continue
        partial = t.attrs.get(trial_record.PARTIAL_VALUE)
        if partial is not None:
            value = float(partial)
        elif t.single and median_single:
            value = floor * min(1.0, t.single / median_single)
        else:
            continue
        points.append((t, value))
        pruned += 1
    return [(t, v) for t, v in points if math.isfinite(v) and v > 0], pruned


def value_labels(points: Sequence[tuple[TrialRecord, float]]) -> dict[str, dict[Any, str]]:
    """For each numeric parameter with more than :data:`MAX_VALUE_GROUPS` distinct values
    among ``points``: each value's group, as a person reads it (``0.8..0.82``), the groups
    of about equal counts. A value seen once would soak up that launch's noise and look
    important; a heatmap of fifteen columns reads worse than one of eight."""
    values: dict[str, list[Any]] = defaultdict(list)
    for t, _ in points:
        for k, v in t.params.items():
            if v is not None:
                values[k].append(v)
    out: dict[str, dict[Any, str]] = {}
    for k, vs in values.items():
        distinct = set(vs)
        if len(distinct) <= MAX_VALUE_GROUPS or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in distinct
        ):
            continue
        seen = sorted(float(v) for v in vs)
        edges = [seen[len(seen) * i // MAX_VALUE_GROUPS] for i in range(1, MAX_VALUE_GROUPS)]
        groups: dict[int, list[Any]] = defaultdict(list)
        for v in distinct:
            groups[sum(float(v) >= e for e in edges)].append(v)
        for g in groups.values():
            label = fmt_value(min(g)) + (f"..{fmt_value(max(g))}" if len(g) > 1 else "")
            out.setdefault(k, {}).update({v: label for v in g})
    return out


def _grouped(points: Sequence[tuple[TrialRecord, float]]) -> list[dict[str, Any]]:
    """Each point's parameters, every parameter of the points on each (one that does not
    apply to a point, ``when`` false, is unset there: ``None``, as the engine runs it), a
    many-valued numeric one replaced by its group (:func:`value_labels`). Told apart from
    an unset value, a parameter that does not apply would share the effect of the one that
    switched it off (``cuda_graph_max_bs`` with ``disable_cuda_graph``)."""
    labels = value_labels(points)
    names = sorted({k for t, _ in points for k in t.params})
    out = []
    for t, _ in points:
        row = {k: t.params.get(k) for k in names}
        out.append({k: labels.get(k, {}).get(v, v) for k, v in row.items()})
    return out


def variance_shares(points: Sequence[tuple[TrialRecord, float]], noise: float) -> dict[str, float]:
    """The share of the variance of log(value) over ``points`` that each parameter's values
    explain in the additive model of :mod:`tuner.effects` (each point its own
    configuration), largest first; sums to 1 (empty when nothing varies)."""
    from tuner import effects

    rows = _grouped(points)
    fitted = effects.fit(
        [
            effects.Observation(row, f"point {i}", v)
            for i, (row, (_, v)) in enumerate(zip(rows, points, strict=True))
        ],
        noise,
    )
    names = sorted({k for row in rows for k in row})
    baseline = object()  # a value no point has: gains from it are the values' own effects
    spread = {}
    for name in names:
        effect = [fitted.gain(name, baseline, row[name])[0] for row in rows]
        mean = sum(effect) / len(effect)
        spread[name] = sum((e - mean) ** 2 for e in effect) / len(effect)
    total = sum(spread.values())
    if total <= 0:
        return {}
    return dict(sorted(((k, v / total) for k, v in spread.items()), key=lambda kv: -kv[1]))


def importances(data: ReportData) -> Importances:
    """Parameter importances (:class:`Importances`) over the measured feasible configurations
    and the pruned trials, by what they measured: leaving pruned trials out would hide the
    settings that cripple a server (they are pruned because they do)."""
    configs = data.configs()
    if len(configs) < MIN_IMPORTANCE_CONFIGS:
        return Importances(
            {},
            {},
            f"Not enough measured configurations for parameter importances: {len(configs)} "
            f"(at least {MIN_IMPORTANCE_CONFIGS} needed).",
        )
    points, pruned = importance_points(data)
    try:
        variance = variance_shares(points, data.noise)
    except (ValueError, np.linalg.LinAlgError) as exc:
        return Importances({}, {}, f"Parameter importances could not be computed: {exc}")
    study = optuna.create_study(direction="maximize")
    for t, value in points:
        study.add_trial(
            optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=value)
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            top = dict(
                optuna.importance.get_param_importances(
                    study,
                    evaluator=optuna.importance.PedAnovaImportanceEvaluator(target_quantile=TOP_QUANTILE),
                )
            )
    except Exception:  # too little variation, a distribution it cannot read: the variance shares remain
        top = {}
    what = "peak tok/s" if data.multi else f"the {data.objective} objective"
    counted = f"{len(configs)} measured feasible configurations" + (
        f" and {pruned} pruned trials (by what they measured: the objective so far)" if pruned else ""
    )
    hint = " Few configurations: read as a hint." if len(configs) < 10 else ""
    note = (
        f"Importances of {what} over {counted}: the share of the variance of log(tok/s) that each "
        "parameter's values explain in an additive model of the study (a setting that cuts throughput "
        "several-fold ranks high), and PED-ANOVA's importance for reaching the top "
        f"{TOP_QUANTILE:.0%} (what separates the best from the good).{hint}"
    )
    return Importances(variance, top, note)


def failure_rows(data: ReportData) -> list[tuple[str, list[int], list[tuple[str, int]]]]:
    """``(class, trial numbers, [(reason, count)...])`` of everything that did not give a
    feasible measurement, most frequent class first."""
    groups: dict[str, list[TrialRecord]] = defaultdict(list)
    for t in data.trials:
        reason = (t.reason or "").strip()
        if t.outcome == "failed":
            groups[f"failed: {t.failure_class or 'unknown'}"].append(t)
        elif t.outcome == "infeasible":
            prefix = reason.split(":", 1)[0].strip() if ":" in reason else "rules"
            groups[f"infeasible: {prefix}"].append(t)
        elif t.outcome == "pruned":
            groups["pruned"].append(t)
        elif t.violations:
            groups["constraint: " + ", ".join(sorted(t.violations))].append(t)
        elif t.state == "FAIL":
            groups["error"].append(t)
    rows = []
    for cls, ts in groups.items():
        reasons = Counter(_one_line(str(t.reason or t.fail_reason or t.outcome))[:200] for t in ts)
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
