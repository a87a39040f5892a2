"""``tuner trials``: one row per trial of a study, what it changed and what it measured."""

from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Callable, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from tuner import estimates, trial_record
from tuner.commands._common import add_study_args, study_storage
from tuner.deployment import DEFAULT_ENGINE
from tuner.errors import UsageError
from tuner.estimates import best_record
from tuner.statement import source_word
from tuner.storage import load_study
from tuner.trial_record import StudyInfo, TrialRecord
from tuner.wording import fmt_value, refusal_text

#: Columns a person can ask for, in the default order, with their headers.
COLUMNS: dict[str, str] = {
    "trial": "trial",
    "state": "state",
    "value": "value",
    "single": "C=1 tok/s",
    "peak": "peak tok/s",
    "peak_c": "at C",
    "changes": "differs from the best",
    "reason": "note",
    "server_s": "server s",
    "mem_left": "GiB left",
    "kv_pool": "KV GiB",
    "params": "params",
}
DEFAULT_COLUMNS = ("trial", "state", "value", "single", "peak", "peak_c", "changes", "reason")
#: --sort keys: (key function over a row, highest first?).
SORTS: dict[str, tuple[Callable[[dict[str, Any]], Any], bool]] = {
    "number": (lambda r: r["trial"], False),
    "value": (lambda r: -1.0 if r["value"] is None else r["value"], True),
    "peak": (lambda r: -1.0 if r["peak"] is None else r["peak"], True),
    "single": (lambda r: -1.0 if r["single"] is None else r["single"], True),
}
#: --state names (the trial's outcome; ``refused``: rejected by the rules before launch).
STATES = ("complete", "pruned", "refused", "failed", "reused", "waiting", "running")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trials",
        help="list a study's trials: one row each, changed parameters, per-level numbers, state",
        description="One row per trial of a study: its state (complete, pruned, refused before launch, "
        "failed, reused), its objective value, single-stream and peak tok/s, the parameters in which it "
        "differs from the best configuration (the best itself reads '(best)'), and why it was pruned, "
        "refused or failed. Unset parameters read '-' (the engine's default).",
    )
    add_study_args(p)
    p.add_argument("--sort", choices=tuple(SORTS), default="number", help="row order (default: number)")
    p.add_argument(
        "--state",
        metavar="STATE[,STATE]",
        help=f"only trials in these states: {', '.join(STATES)}",
    )
    p.add_argument(
        "--columns",
        metavar="COL[,COL]",
        help=f"columns to show, in order (default {','.join(DEFAULT_COLUMNS)}; "
        f"available: {', '.join(COLUMNS)})",
    )
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    p.set_defaults(handler=run)


def _state(t: FrozenTrial, rec: TrialRecord) -> str:
    if t.state == TrialState.WAITING:
        return "waiting"
    if t.state == TrialState.RUNNING:
        return "running"
    if rec.outcome == "infeasible":
        return "refused"
    if rec.outcome == "fail":
        return "failed"
    return rec.outcome


def _note(t: FrozenTrial, rec: TrialRecord, engine: str | None, outlier: str | None = None) -> str:
    reason = rec.reason or ""
    if outlier is not None:
        said = {
            estimates.PENDING: "outlier, re-measuring",
            estimates.KEPT: "outlier, kept: its configuration's launches agree with it",
            estimates.DROPPED: "outlier, dropped: its configuration's other launches disagree with it",
        }[outlier]
        flagged = rec.attrs.get(trial_record.OUTLIER)
        if flagged:
            said += f" ({flagged['measured']:.0f} where ~{flagged['expected']:.0f} was expected)"
        reason = f"{said} {reason}".strip()
    if rec.outcome == "infeasible":
        reason = refusal_text(rec.reason, engine)
    if rec.outcome == "reused":
        reason = f"reused trial #{rec.reused_from}"
    if rec.repeat_of is not None:
        reason = (f"launched again: same configuration as #{rec.repeat_of} " + reason).strip()
    if rec.model_pick is not None:
        pick = f"the additive model's pick: #{rec.model_pick} with the changes the study favours"
        reason = f"{pick} {reason}".strip()
    if rec.rewrites:  # the engine starts another server than the flags say
        changed = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in rec.rewrites.items())
        reason = f"{reason} (SGLang resolves {changed})".strip()
    if "retry_history" in t.system_attrs or "failed_trial" in t.system_attrs:
        reason = (reason + f" (retry of #{t.system_attrs.get('failed_trial')})").strip()
    return reason


def rows(
    trials: Sequence[FrozenTrial], best: TrialRecord | None, engine: str | None = None
) -> list[dict[str, Any]]:
    """One dict per trial, with every column of :data:`COLUMNS` (numbers as numbers);
    ``changes``: the trial's values of the parameters where it differs from ``best``."""
    out = []
    verdicts = estimates.outlier_verdicts(trials)
    for t in trials:
        rec = TrialRecord.of(t)
        if best is None:
            changes = ""
        elif best.number == rec.number:
            changes = "(best)"
        elif rec.number in best.runs:
            changes = f"(the best's configuration, another launch than #{best.number})"
        else:
            names = list(best.params) + [k for k in rec.params if k not in best.params]
            diff = [k for k in names if best.params.get(k) != rec.params.get(k)]
            changes = " ".join(f"{k}={fmt_value(rec.params.get(k))}" for k in diff) or "(same configuration)"
        value = rec.values[-1] if rec.values and rec.measured else None
        out.append(
            {
                "trial": rec.number,
                "state": _state(t, rec),
                "value": value,
                "single": rec.single,
                "peak": rec.peak,
                "peak_c": rec.peak_c,
                "changes": changes,
                "reason": _note(t, rec, engine, verdicts.get(rec.number)),
                "server_s": rec.server_s,
                "mem_left": rec.memory_left_gib,
                "kv_pool": rec.kv_cache_gib,
                "params": {k: rec.params[k] for k in rec.params},
            }
        )
    return out


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}"
    if isinstance(v, dict):
        return " ".join(f"{k}={fmt_value(x)}" for k, x in v.items())
    return str(v)


def _csv_cell(v: Any) -> Any:
    if v is None:
        return ""
    return json.dumps(v) if isinstance(v, dict) else v


def table(data: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Aligned columns, one line per trial (the last column is never padded nor cut)."""
    header = [COLUMNS[c] for c in columns]
    grid = [header] + [[f"#{r[c]}" if c == "trial" else _cell(r[c]) for c in columns] for r in data]
    if list(columns[-2:]) == ["changes", "reason"]:
        # Both are long free text: one last column keeps each row one readable line.
        columns = list(columns[:-1])
        grid = [[*header[:-2], "differs from the best; note"]] + [
            [*row[:-2], "; ".join(x for x in row[-2:] if x)] for row in grid[1:]
        ]
    widths = [max(len(row[i]) for row in grid) for i in range(len(columns))]
    numeric = {"value", "single", "peak", "peak_c", "server_s", "mem_left", "kv_pool"}
    lines = []
    for row in grid:
        cells = [
            (cell.rjust(w) if columns[i] in numeric else cell.ljust(w)) if i < len(columns) - 1 else cell
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    columns = [c.strip() for c in (args.columns or ",".join(DEFAULT_COLUMNS)).split(",") if c.strip()]
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown or not columns:
        raise UsageError(
            f"--columns: unknown column(s) {', '.join(unknown)}; available: {', '.join(COLUMNS)}"
        )
    states = [s.strip() for s in args.state.split(",") if s.strip()] if args.state else []
    bad = [s for s in states if s not in STATES]
    if bad:
        raise UsageError(f"--state: unknown state(s) {', '.join(bad)}; one of {', '.join(STATES)}")
    try:
        study = load_study(args.study, study_storage(args))
    except LookupError as exc:
        raise UsageError(str(exc)) from exc
    info = StudyInfo.of(study.user_attrs)
    data = rows(study.get_trials(deepcopy=False), best_record(study), info.engine or DEFAULT_ENGINE)
    if states:
        data = [r for r in data if r["state"] in states]
    key, reverse = SORTS[args.sort]
    data.sort(key=key, reverse=reverse)
    if args.format == "json":
        print(json.dumps([{c: r[c] for c in columns} for r in data], indent=2))
    elif args.format == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        for r in data:
            writer.writerow(
                [
                    "" if r[c] is None else (json.dumps(r[c]) if isinstance(r[c], dict) else r[c])
                    for c in columns
                ]
            )
        print(buf.getvalue(), end="")
    else:
        fallback = next((TrialRecord.of(t).backend for t in study.get_trials(deepcopy=False)), None)
        source = source_word(info.backend, fallback)
        print(f"study {study.study_name}: {len(data)} trial(s), {info.objective} tok/s {source}; '-': unset")
        print(table(data, columns))
    return 0
