"""Notes and artifacts on trials, for optuna-dashboard.

The dashboard shows a trial's parameters and values, but not what a person needs to
judge a serving configuration: the numbers of each concurrency level, why a trial was
pruned or refused, whether it met the study's constraints (optuna-dashboard 0.21 does
not display Optuna 5's ``set_constraint`` values at all, and may star an infeasible
trial), whether its result was copied from an identical configuration, and the unit
file that would launch it. :func:`annotate_trial` writes all of that as the trial's
Markdown note (``optuna_dashboard.save_note``) and stores the files (unit, per-level
metrics as JSON, server log, request records) in a
:class:`optuna.artifacts.FileSystemArtifactStore` the dashboard serves.

Where an artifact's record goes: Optuna refuses to change a finished trial, and a
study callback only ever sees finished trials. A running trial gets its artifacts
through ``optuna.artifacts.upload_artifact``; a finished one gets the record the
dashboard itself reads for trial artifacts kept at study level
(``dashboard:artifacts:<trial_id>:<artifact_id>``). Artifact ids are derived from the
study, trial and file name, so annotating a trial again replaces its files instead
of adding copies.

Cost: two reads of the study's system attributes, four or five small writes (one
commit each with SQLite) and a few small files: about 20 ms per trial plus the
commits' fsyncs. Nothing here raises into the study (failures are logged as
warnings). :class:`TrialAnnotator` is the ready-made study callback.
"""

from __future__ import annotations

import io
import json
import math
import mimetypes
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from loguru import logger
from optuna.artifacts import FileSystemArtifactStore
from optuna.trial import FrozenTrial, TrialState

from tuner import redact, trial_record
from tuner.deployment import DEFAULT_ENGINE, unit_text
from tuner.metrics import tok_s_text
from tuner.statement import statement_lines
from tuner.storage import STUDIES_DIR
from tuner.trial_record import StudyInfo, TrialRecord
from tuner.wording import refusal_text

#: Prefix under which optuna-dashboard looks for a trial's artifacts in the study's
#: system attributes (followed by ``<trial_id>:<artifact_id>``).
DASHBOARD_TRIAL_ARTIFACT_PREFIX = "dashboard:artifacts:"
_ID_NAMESPACE = uuid.UUID("6f1d2c4e-0b7a-5d8e-9c3f-7a1b2c3d4e5f")

LEVEL_COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (header, LevelMetrics field, format)
    ("C", "concurrency", "d"),
    ("tok/s", "output_tok_s", ".1f"),
    ("wall s", "wall_s", ".1f"),
    ("TTFT p50 s", "ttft_s_p50", ".3f"),
    ("TTFT p99 s", "ttft_s_p99", ".3f"),
    ("ITL p50 ms", "itl_ms_p50", ".1f"),
    ("TPOT ms", "tpot_ms_mean", ".1f"),
)


def default_artifact_dir(storage_url: str, study_name: str) -> Path:
    """Where a study's artifacts live: ``<study>-artifacts/`` next to its SQLite file
    (``studies/<study>-artifacts/`` for the default storage), else under ./studies."""
    if storage_url.startswith("sqlite:///"):
        db = Path(storage_url.removeprefix("sqlite:///"))
        return db.parent / f"{study_name}-artifacts"
    return STUDIES_DIR / f"{study_name}-artifacts"


# --------------------------------------------------------------------------- the note


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def levels_table(levels: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown table of the per-level metrics (C, tok/s, wall, TTFT p50/p99, ITL p50, TPOT)."""
    header = [h for h, _, _ in LEVEL_COLUMNS] + ["done"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for lv in levels:
        cells = [_fmt(lv.get(field), spec) for _, field, spec in LEVEL_COLUMNS]
        if lv.get("stopped_early"):
            cells[1] = tok_s_text(lv)
        done = f"{lv.get('completed', 0)}" + (f" ({lv['failed']} failed)" if lv.get("failed") else "")
        if lv.get("stopped_early"):
            done += " (stopped early: tok/s projected)"
        lines.append("| " + " | ".join([*cells, done]) + " |")
    return lines


_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|#"})


def md_escape(text: str) -> str:
    """Free text (a server's error message) shown literally in Markdown, on one line."""
    return " ".join(str(text).split()).translate(_MD_SPECIAL)


def state_in_words(t: FrozenTrial, engine: str | None = None) -> str:
    """What happened to the trial, in a sentence (Markdown: free text is escaped); ``engine``
    names whose rules refused a configuration (default: SGLang)."""
    rec = TrialRecord.of(t)
    outcome = rec.attrs.get(trial_record.OUTCOME)
    reason = md_escape(rec.reason or "")
    n_levels = len(rec.levels)
    if t.state == TrialState.RUNNING:
        return "running"
    if t.state == TrialState.WAITING:
        return "waiting to run"
    if outcome == "complete":
        text = f"complete: measured all {n_levels} levels"
        return text + (f"; {reason}" if reason else "")
    if outcome == "reused":
        return (
            f"reused: the same configuration as trial #{rec.reused_from}, whose results were "
            "copied (no server started)" + (f"; {reason}" if reason else "")
        )
    if outcome == "pruned":
        return (
            f"pruned: {reason or 'stopped early'}, after {n_levels} level(s): its throughput there was "
            "far below the best trials' at the same level"
        )
    engine = engine or DEFAULT_ENGINE
    if outcome == "infeasible":
        return f"not launched, {md_escape(refusal_text(rec.reason, engine))}"
    if outcome == "failed" and rec.backend == "sim" and rec.failure_class in ("invalid-args", "crash"):
        message = (rec.reason or "").removeprefix(f"{rec.failure_class}: ")
        return f"not measured, {md_escape(refusal_text(message, engine))}"
    if outcome == "failed":
        return f"failed ({rec.failure_class or 'unknown'}): {reason or 'the server did not start'}"
    if t.state == TrialState.FAIL:
        why = rec.fail_reason or "the trial raised an error or its worker stopped"
        return f"error: {md_escape(why)}"
    return t.state.name.lower()


def constraints_in_words(t: FrozenTrial) -> str:
    """Constraint status (Optuna 5 ``set_constraint``, feasible when <= 0) in words."""
    constraints = t.constraints
    if not constraints:
        return "none recorded"
    met, violated = [], []
    single = TrialRecord.of(t).single
    for key, v in sorted(constraints.items()):
        if key == "min_single_stream":
            if v > 0:
                violated.append(f"min_single_stream: single-stream short by {v:.1f} tok/s")
            else:
                got = f" ({single:.1f} tok/s)" if single is not None else ""
                met.append(f"min_single_stream: met{got}, {-v:.1f} tok/s above the floor")
        elif key == "feasible":
            (violated if v > 0 else met).append(
                "launch rules: refused before launch" if v > 0 else "launch rules: accepted"
            )
        elif key == "launch":
            (violated if v > 0 else met).append(
                "launch: the server failed to start" if v > 0 else "launch: started"
            )
        elif v > 0:
            violated.append(f"{key}: violated by {v:g}")
        else:
            met.append(f"{key}: met ({v:g})")
    if violated:
        return "violated: " + "; ".join(violated) + (f" (met: {'; '.join(met)})" if met else "")
    return "feasible: " + "; ".join(met)


def trial_note(
    study_name: str,
    t: FrozenTrial,
    *,
    unit_text: str | None,
    artifacts: list[str],
    engine: str | None = None,
) -> str:
    """The Markdown note of a trial (see the module docstring for what it holds)."""
    unit = unit_text
    rec = TrialRecord.of(t)
    values = "/".join(f"{v:.1f}" for v in t.values) if t.values else "-"
    measured_nothing = rec.outcome in ("infeasible", "failed")
    if t.values and measured_nothing:
        value = f"none measured ({values} is a placeholder for the sampler)"
    else:
        value = values + (" tok/s" if t.values else "")
    source = "simulated" if rec.backend == "sim" else f"backend {rec.backend or '?'}"
    lines = [f"### Trial {t.number} of {study_name}", ""]
    if measured_nothing and t.state == TrialState.COMPLETE:
        # Optuna lists such a trial as Complete with value 0: say first that it is not a result.
        lines.append(
            "**Not a measurement:** this configuration measured nothing; the dashboard lists it as "
            "Complete with value 0 only because the sampler must be told it is no good.  "
        )
    lines += [
        f"**State:** {state_in_words(t, engine)}  ",
        f"**Value:** {value} ({source})  ",
        f"**Constraints:** {constraints_in_words(t)}  ",
    ]
    if rec.reused_from is not None:
        lines.append(f"**Reused:** results of trial #{rec.reused_from} (same configuration)  ")
    if rec.server_s is not None:
        startup = f", of which start-up {rec.startup_s:.0f} s" if rec.startup_s else ""
        lines.append(f"**Server time:** {float(rec.server_s):.0f} s{startup}  ")
    if rec.levels:
        lines += ["", *levels_table(rec.levels)]
    if unit:
        lines += ["", "systemd unit:", "", "```ini", unit.rstrip("\n"), "```"]
    elif rec.argv:
        lines += ["", "command:", "", "```", " ".join(rec.argv), "```"]
    if artifacts:
        lines += ["", "Artifacts: " + ", ".join(f"`{name}`" for name in artifacts)]
    lines.append("")
    lines.append("_Written by tuner; the dashboard does not display Optuna 5 constraints, hence the words._")
    return "\n".join(lines) + "\n"


def unit_for_trial(
    study: optuna.Study, t: FrozenTrial, *, study_attrs: Mapping[str, Any] | None = None
) -> str | None:
    """The systemd unit that launches trial ``t``'s configuration, rendered as ``tuner best``
    does (``study_attrs``: the study's user attributes, read from the study when None).
    None when the trial has no command or the unit cannot be rendered on this machine."""
    rec = TrialRecord.of(t)
    if not rec.argv:
        return None
    info = StudyInfo.of(study.user_attrs if study_attrs is None else study_attrs)
    engine = info.engine or DEFAULT_ENGINE
    try:
        return unit_text(
            study.study_name,
            rec,
            info,
            description=f"{engine} server, trial {t.number} of {study.study_name} (tuner)",
        )
    except ValueError as exc:
        logger.debug(f"trial #{t.number}: no unit: {exc}")
        return None


# --------------------------------------------------------------------------- writing


def _artifact_id(study_name: str, number: int, filename: str) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, f"{study_name}\0{number}\0{filename}"))


def _put(
    study: optuna.Study,
    t: FrozenTrial,
    store: FileSystemArtifactStore,
    filename: str,
    data: bytes,
) -> None:
    """Store ``data`` as trial ``t``'s artifact ``filename`` (see the module docstring)."""
    storage = study._storage
    if not t.state.is_finished():
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / filename
            path.write_bytes(data)
            optuna.artifacts.upload_artifact(
                artifact_store=store, file_path=str(path), study_or_trial=t, storage=storage
            )
        return
    artifact_id = _artifact_id(study.study_name, t.number, filename)
    mimetype, encoding = mimetypes.guess_type(filename)
    meta = {
        "artifact_id": artifact_id,
        "filename": filename,
        "mimetype": mimetype or "application/octet-stream",
        "encoding": encoding,
    }
    store.write(artifact_id, io.BytesIO(data))
    storage.set_study_system_attr(
        study._study_id, f"{DASHBOARD_TRIAL_ARTIFACT_PREFIX}{t._trial_id}:{artifact_id}", json.dumps(meta)
    )


def _levels_json(study_name: str, t: FrozenTrial) -> bytes:
    rec = TrialRecord.of(t)
    doc = {
        "study": study_name,
        "trial": t.number,
        "state": t.state.name,
        "outcome": rec.attrs.get(trial_record.OUTCOME),
        "values": t.values,
        "params": t.params,
        "argv": rec.argv or None,
        "env": rec.attrs.get(trial_record.ENV),
        "levels": rec.levels,
        "intermediate_values": {str(k): v for k, v in sorted(t.intermediate_values.items())},
        "constraints": t.constraints,
        "reused_from": rec.reused_from,
    }
    return (json.dumps(doc, indent=2, default=str) + "\n").encode()


def annotate_trial(
    study: optuna.Study,
    frozen_trial: FrozenTrial,
    *,
    artifact_dir: Path,
    log_path: Path | None = None,
    unit_text: str | None = None,
    records_path: Path | None = None,
    engine: str | None = None,
) -> bool:
    """Write trial ``frozen_trial``'s note and artifacts (unit, per-level JSON, server log
    or its stored tail, request records) for optuna-dashboard.

    Never raises: a failure is logged as a warning and False returned, so a study
    callback can call it without risking the study.
    """
    try:
        from optuna_dashboard import save_note

        artifact_dir = Path(artifact_dir)
        artifact_dir.mkdir(parents=True, exist_ok=True)
        store = FileSystemArtifactStore(artifact_dir)
        n = frozen_trial.number
        files: list[tuple[str, bytes]] = []
        if unit_text:
            files.append((f"trial-{n}.service", unit_text.encode()))
        rec = TrialRecord.of(frozen_trial)
        if rec.levels or rec.argv:
            files.append((f"trial-{n}-levels.json", _levels_json(study.study_name, frozen_trial)))
        if log_path is not None and Path(log_path).is_file():
            files.append((f"trial-{n}-server.log", Path(log_path).read_bytes()))
        elif rec.log_tail:
            files.append((f"trial-{n}-log-tail.txt", str(rec.log_tail).encode()))
        if records_path is not None and Path(records_path).is_file():
            files.append((f"trial-{n}-{Path(records_path).name}", Path(records_path).read_bytes()))
        for name, data in files:
            _put(study, frozen_trial, store, name, redact.text(data.decode("utf-8", "replace")).encode())
        note = redact.text(
            trial_note(
                study.study_name,
                frozen_trial,
                unit_text=unit_text,
                artifacts=[f for f, _ in files],
                engine=engine,
            )
        )
        trial = optuna.Trial(study, frozen_trial._trial_id)
        save_note(trial, note)
        return True
    except Exception as exc:
        logger.warning(f"annotating trial #{frozen_trial.number} for the dashboard failed: {exc!r}")
        return False


class TrialAnnotator:
    """A study callback that annotates every finished trial (see :func:`annotate_trial`).

    ``logs``: optional function from a finished trial to its ``(server log, request
    records)`` paths (either may be None). The study's user attributes (unit settings,
    engine) are read once. The writes happen in the callback: a background thread was
    measured slower overall with SQLite, whose writers queue on one file lock.
    """

    def __init__(
        self,
        artifact_dir: Path,
        *,
        logs: Callable[[FrozenTrial], tuple[Path | None, Path | None]] | None = None,
    ):
        self.artifact_dir = Path(artifact_dir)
        self.logs = logs
        self._study_attrs: Mapping[str, Any] | None = None

    def __call__(self, study: optuna.Study, frozen_trial: FrozenTrial) -> None:
        try:
            if self._study_attrs is None:  # read once: a storage round trip per call otherwise
                self._study_attrs = dict(study.user_attrs)
            log_path, records_path = self.logs(frozen_trial) if self.logs is not None else (None, None)
            unit_text = unit_for_trial(study, frozen_trial, study_attrs=self._study_attrs)
        except Exception as exc:
            logger.warning(f"annotating trial #{frozen_trial.number} for the dashboard failed: {exc!r}")
            return
        annotate_trial(
            study,
            frozen_trial,
            artifact_dir=self.artifact_dir,
            log_path=log_path,
            unit_text=unit_text,
            records_path=records_path,
            engine=StudyInfo.of(self._study_attrs).engine,
        )


#: Ids of the figures tuner adds to the study's page in optuna-dashboard (its "plotly graph
#: objects": each a card of its own; saved again under the same id, a figure is replaced).
IMPORTANCE_GRAPH_ID = "tuner-importances"
PAIR_GRAPH_ID = "tuner-two-most-important"
#: optuna-dashboard draws such a figure in a card 450 px high (its ``user-defined-plot``):
#: the figures are sized to it, the importances to their ten largest.
DASHBOARD_FIGURE_HEIGHT = 440
DASHBOARD_IMPORTANCES = 10


def study_note(study: optuna.Study, ranked: Sequence[str] = ()) -> str:
    """The Markdown note of the study: what was measured, on what, in which units, the
    winner with its confidence (the lines ``tuner best`` prints), and, given the parameters
    ``ranked`` by importance, which matter and where the dashboard's own cards differ."""
    from tuner.verdict import verdict

    info = StudyInfo.of(study.user_attrs)
    fallback = next((TrialRecord.of(t).backend for t in study.get_trials(deepcopy=False)), None)
    lines = [f"### Study {study.study_name}", ""]
    lines += [
        f"- {md_escape(line)}"
        for line in statement_lines(info.workload, info.backend, fallback_backend=fallback, proxy=info.proxy)
    ]
    found = verdict(study)
    lines.append("")
    if found is None:
        lines.append("No feasible configuration measured yet.")
    else:
        w = found.winner
        lines.append(f"**Best:** trial #{w.number}, {info.objective} {w.mean:.1f} tok/s  ")
        lines += [f"{md_escape(line)}  " for line in found.lines()]
        lines.append(
            f"\nDeploy it: `tuner best --study {study.study_name} > {info.engine or DEFAULT_ENGINE}.service`"
        )
        lines.append(
            "\nThe dashboard's *Best Trial* card shows the single launch with the highest value; the best "
            "above is judged on every launch of each configuration (the estimate and its interval)."
        )
    if len(ranked) >= 2:
        top = ", ".join(f"`{name}`" for name in ranked[:3])
        lines += [
            "",
            f"**Parameters that matter most:** {top} (their share of the variance of log tok/s, pruned "
            "trials counted by what they measured: the figures *Parameter importances* and *Best tok/s by "
            f"{md_escape(ranked[0])} and {md_escape(ranked[1])}* on the study's page). The dashboard's own "
            "*Hyperparameter Importance* card counts complete trials only (PED-ANOVA: what reaches the "
            "top 10%), and its contour plot starts on the first two parameters by name: choose "
            f"`{ranked[0]}` and `{ranked[1]}` there.",
        ]
    lines += ["", "_Written by tuner at the end of each search._"]
    return "\n".join(lines) + "\n"


def annotate_study(study: optuna.Study, artifact_dir: Path | None = None) -> bool:
    """Write the study's note for optuna-dashboard (:func:`study_note`) and its figures of
    the parameter importances and of the two most important parameters against each other
    (:mod:`tuner.report`: pruned trials counted by what they measured, which the dashboard's
    own importance card and contour plot leave out). Never raises."""
    try:
        from optuna_dashboard import save_note, save_plotly_graph_object

        from tuner.report.data import ReportData, importances
        from tuner.report.figures import importance_figure, pair_figure

        data = ReportData.of(study, with_curves=False)
        imp = importances(data)
        save_note(study, study_note(study, imp.ranked()))
        if imp.variance:
            fig = importance_figure(imp, top=DASHBOARD_IMPORTANCES)
            fig.update_layout(
                title={"text": "Parameter importances (pruned trials counted)", "x": 0.01},
                height=DASHBOARD_FIGURE_HEIGHT,
                modebar={"orientation": "v"},  # clear of the title
            )
            save_plotly_graph_object(study, fig, graph_object_id=IMPORTANCE_GRAPH_ID)
        pair = pair_figure(data, imp)
        if pair is not None:
            pair.update_layout(height=DASHBOARD_FIGURE_HEIGHT, modebar={"orientation": "v"})
            save_plotly_graph_object(study, pair, graph_object_id=PAIR_GRAPH_ID)
        return True
    except Exception as exc:
        logger.warning(f"writing the study's dashboard note failed: {exc!r}")
        return False
