"""A trial's configuration in the forms a person deploys: a systemd unit or a shell command.

``tuner best`` renders the recommended trial this way and the dashboard's notes render
every trial the same way, so the unit a person copies from either launches what was
measured, with the same header of measured numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.engines.base import LaunchSpec
from tuner.metrics import PROJECTED_MARK, LevelMetrics, tok_s_text
from tuner.objectives import peak_tok_s, single_stream
from tuner.statement import statement_lines
from tuner.systemd_unit import render_shell, render_systemd_unit
from tuner.trial_record import PYTHON, StudyInfo, TrialRecord

#: Engine of studies that did not record theirs (the first engine the tuner supported).
DEFAULT_ENGINE = "sglang"
#: The interpreter of a unit when nothing names the GPU host's: the first ``python3`` on
#: the PATH of the host that runs the unit (never the PATH of the machine rendering it).
ENV_PYTHON = "/usr/bin/env python3"


def unit_interpreter(rec: TrialRecord, info: StudyInfo, override: str | None = None) -> tuple[str, str]:
    """The interpreter a unit for trial ``rec`` runs, and where it comes from: ``override``
    (``--python``, ``TUNER_PYTHON``), else the interpreter the trial's host resolved and
    stored on the trial, else the space's ``launch.python``, else :data:`ENV_PYTHON`."""
    if override:
        return override, "given with --python (or the python setting)"
    recorded = rec.attrs.get(PYTHON)
    if recorded:
        return str(recorded), f"the interpreter trial #{rec.number} ran on its host"
    if info.unit.get("python"):
        return str(info.unit["python"]), "the space's launch.python"
    return ENV_PYTHON, "python3 from the PATH of the unit's host; pin one with tuner best --python PATH"


def launch_spec(rec: TrialRecord, info: StudyInfo) -> LaunchSpec:
    """The launch trial ``rec`` measured (its command and environment)."""
    return LaunchSpec(argv=list(rec.argv), env=dict(rec.env), engine=info.engine or DEFAULT_ENGINE)


def header_lines(
    study_name: str, rec: TrialRecord, info: StudyInfo | None = None, notes: Sequence[str] = ()
) -> list[str]:
    """The comment lines at the top of a unit: study, trial, what was measured on what
    (``info``: the study's workload and backend), the measured numbers, what the
    recommendation rests on (repeated launches, the pooled estimate) and ``notes``."""
    levels = [LevelMetrics(**lv) for lv in rec.levels]
    lines = [f"tuner study {study_name}, trial #{rec.number}"]
    if info is not None:
        lines += statement_lines(info.workload, info.backend, fallback_backend=rec.backend, proxy=info.proxy)
    lines.append(
        f"single-stream {single_stream(levels):.1f} tok/s, peak {peak_tok_s(levels):.1f} tok/s "
        f"(backend {rec.backend or '?'})"
    )
    lines += [f"  C={lv.concurrency}: {tok_s_text(lv)} tok/s" for lv in levels]
    if any(lv.stopped_early for lv in levels):
        lines.append(
            f"  ({PROJECTED_MARK}: a level stopped before it drained, as it could not raise the peak)"
        )
    if rec.fidelity == "proxy":
        lines.append("measured on the screening proxy only, not yet on the whole target workload")
    elif rec.target_runs:
        lines.append(
            f"measured on the target workload in {len(rec.target_runs)} of its {len(rec.runs)} launches"
        )
    if len(rec.runs) > 1 and rec.mean is not None:
        trials = ", ".join(f"#{n}" for n in rec.runs)
        lines.append(f"launched {len(rec.runs)} times (trials {trials}): objective mean {rec.mean:.1f} tok/s")
    if rec.estimate is not None and not notes:  # the notes of ``tuner best`` say it with an interval
        lines.append(
            f"estimated objective {rec.estimate:.1f} tok/s (its launches pooled with what its "
            "settings measured in the rest of the study)"
        )
    lines += notes
    if not rec.feasible:
        lines.append(f"not a recommended configuration: {rec.outcome}")
    return lines


def unit_text(
    study_name: str,
    rec: TrialRecord,
    info: StudyInfo,
    *,
    python: str | None = None,
    description: str | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The systemd unit that launches trial ``rec``'s configuration, with the study's unit
    settings (:attr:`StudyInfo.unit`). ``python``: the interpreter (default: see
    :func:`unit_interpreter`); ``description``: used when the settings give none (default: the
    engine's server tuned by this study); ``notes``: more header lines. Raises ValueError
    when the unit cannot be rendered (no command, a relative path, a program not found here)."""
    spec = launch_spec(rec, info)
    settings = info.unit
    interpreter, why = unit_interpreter(rec, info, python)
    return render_systemd_unit(
        spec,
        description=settings.get("description")
        or description
        or f"{spec.engine} server tuned by tuner ({study_name})",
        header=[*header_lines(study_name, rec, info, notes), f"interpreter: {interpreter} ({why})"],
        python=interpreter,
        user=settings.get("user"),
        working_directory=settings.get("working_directory"),
        environment_file=settings.get("environment_file"),
    )


def shell_text(rec: TrialRecord, info: StudyInfo) -> str:
    """A copy-pasteable shell command that launches trial ``rec``'s configuration."""
    return render_shell(launch_spec(rec, info))
