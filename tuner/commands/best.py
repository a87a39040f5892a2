"""``tuner best``: the winning configuration as a systemd unit, a shell command or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tuner.commands._common import add_study_args, study_storage
from tuner.deployment import launch_spec, shell_text, unit_text
from tuner.errors import UsageError
from tuner.settings import load as load_settings
from tuner.statement import UNITS, backend_text, workload_text
from tuner.storage import load_study
from tuner.trial_record import StudyInfo
from tuner.verdict import verdict


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "best",
        help="print the best configuration: systemd unit (default), shell command or JSON",
        description="The best feasible trial of a study, rendered as a complete systemd unit (ExecStart "
        "with the winning flags, one Environment= line per variable), a copy-pasteable shell command, "
        "or JSON. The comment header (and the JSON) says what was measured on what (workload, "
        "simulated/emulated/real backend, units), the winner's estimate with an interval from the "
        "study's noise model, the launches it rests on, the runner-up (how far behind it is and the "
        "settings it differs in), and the latency at the winning level (per-user tok/s, ITL p50, TTFT p99).",
    )
    add_study_args(p)
    p.add_argument("--format", choices=("systemd", "shell", "json"), default="systemd")
    p.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")
    p.add_argument(
        "--python",
        metavar="PATH",
        help="absolute interpreter path for the unit's ExecStart on the target host "
        "(default: TUNER_PYTHON, else the interpreter the trial's host ran, else the space's "
        "launch.python, else /usr/bin/env python3)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        study = load_study(args.study, study_storage(args))
    except LookupError as exc:
        raise UsageError(str(exc)) from exc
    found = verdict(study)
    if found is None:
        raise UsageError(f"study {study.study_name} has no feasible completed trial yet")
    rec = found.winner
    info = StudyInfo.of(study.user_attrs)
    if args.format == "json":
        spec = launch_spec(rec, info)
        text = json.dumps(
            {
                "study": study.study_name,
                "trial": rec.number,
                "value": rec.final_value,
                "values": rec.values,
                "runs": list(rec.runs),
                "target_runs": list(rec.target_runs),
                "fidelity": rec.fidelity,
                "mean": rec.mean,
                "estimate": rec.estimate,
                "params": rec.params,
                "argv": spec.argv,
                "flags": flags_only(spec.argv),
                "env": spec.env,
                "levels": rec.levels,
                "workload": info.workload,
                "proxy": info.proxy,
                "measured": {
                    "workload": workload_text(info.workload),
                    "backend": backend_text(info.backend, rec.backend),
                    "units": UNITS,
                },
                "confidence": found.as_dict(),
            },
            indent=2,
        )
    elif args.format == "shell":
        text = shell_text(rec, info)

    else:
        python = args.python or load_settings().python
        text = unit_text(study.study_name, rec, info, python=python, notes=found.lines())
    if args.output:
        args.output.write_text(text if text.endswith("\n") else text + "\n")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def flags_only(argv: list[str]) -> list[str]:
    """The engine's flags alone: argv from the first ``--flag`` on."""
    for i, word in enumerate(argv):
        if word.startswith("--"):
            return argv[i:]
    return []
