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

import optuna

from tuner import estimates, trial_record
from tuner.estimates import Estimate
from tuner.trial_record import StudyInfo, TrialRecord
from tuner.verdict import Verdict, verdict
from tuner.wording import fmt_value

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
    ("latency", "Latency vs concurrency: TTFT and ITL, top configurations"),
)
#: Levels of the throughput and latency curves of a simulated study's top configurations
#: (the reference campaign's sweep, plus the study's own levels).
CURVE_LEVELS = (1, 8, 16, 32, 64, 128, 192, 256)


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
    #: Simulated sweeps over :data:`CURVE_LEVELS` of the top configurations, by trial number
    #: (simulated studies only: a real study's curve is what it measured).
    curves: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def of(cls, study: optuna.Study) -> ReportData:
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
        )
        data.curves = simulated_curves(data)
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


def simulated_curves(data: ReportData, n: int = CURVES_N) -> dict[int, list[dict[str, Any]]]:
    """The top ``n`` configurations of a simulated study swept by the simulator over
    :data:`CURVE_LEVELS` (noise off), so the throughput and latency figures show curves, not
    a line between the few levels the search measured. Empty for other studies."""
    backend = data.info.backend if data.info is not None else None
    if not backend or backend.get("kind") != "simulated" or not backend.get("hardware_id"):
        return {}
    from tuner.deployment import launch_spec
    from tuner.measurers import SimMeasurer
    from tuner.objectives import Objective
    from tuner.workload import Workload

    try:
        base = Workload(**(data.info.workload or {}))  # type: ignore[union-attr]
        workload = base.model_copy(update={"levels": tuple(sorted({*CURVE_LEVELS, *base.levels}))})
        sim = SimMeasurer(backend["hardware_id"], backend["model_id"], noise=0.0, startup_s=0.0)
    except Exception:  # an edited profile or workload: the measured points remain
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    for t in data.configs()[:n]:
        try:
            m = sim.measure(
                launch_spec(t, data.info),  # type: ignore[arg-type]
                workload,
                Objective(),
                trial_label="report",
                seed=0,
                on_level=lambda *a: True,
            )
        except Exception:
            continue
        if m.status == "ok":
            out[t.number] = [lv.model_dump() for lv in m.levels]
    return out


def importances(data: ReportData) -> tuple[dict[str, float], str]:
    """Parameter importances over the measured feasible configurations and the pruned
    trials (by what they measured: their partial value, a lower bound of the objective,
    or, where they were cut before the objective's levels, the lowest measured value scaled
    by their single stream's ratio to the median), and a sentence on what they are based on (or why there
    are none). Leaving pruned trials out would hide the settings that cripple a server."""
    configs = data.configs()
    if len(configs) < MIN_IMPORTANCE_CONFIGS:
        return {}, (
            f"Not enough measured configurations for parameter importances: {len(configs)} "
            f"(at least {MIN_IMPORTANCE_CONFIGS} needed)."
        )
    study = optuna.create_study(direction="maximize")
    measured = [t.final_value for t in configs if t.final_value is not None and math.isfinite(t.final_value)]
    floor = min(measured, default=0.0)
    pruned = 0
    for t in configs:
        value = t.final_value
        if value is None or not math.isfinite(value):
            continue
        study.add_trial(
            optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=value)
        )
    singles = sorted(t.single for t in configs if t.single)
    median_single = singles[len(singles) // 2] if singles else None
    for t in data.trials:
        if t.outcome != "pruned" or t.reused_from is not None or not t.distributions:
            continue
        partial = t.attrs.get(trial_record.PARTIAL_VALUE)
        if partial is not None:
            value = float(partial)
        elif t.single and median_single:
            # Cut before the objective's levels: the lowest measured value, scaled by how far
            # its single stream fell below the measured configurations' median.
            value = floor * min(1.0, t.single / median_single)
        else:
            continue
        trial = optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=value)
        study.add_trial(trial)
        pruned += 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator()
            )
    except Exception as exc:  # too little variation, a distribution it cannot read...
        return {}, f"Parameter importances could not be computed: {exc}"
    what = "peak tok/s" if data.multi else f"the {data.objective} objective"
    counted = f"{len(configs)} measured feasible configurations" + (
        f" and {pruned} pruned trials (by what they measured)" if pruned else ""
    )
    hint = " (few: read as a hint)." if len(configs) < 10 else "."
    return dict(result), f"PED-ANOVA importances of {what} over {counted}{hint}"


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
