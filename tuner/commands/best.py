"""``tuner best``: the winning configuration as a systemd unit, a shell command or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tuner.commands._common import add_study_args
from tuner.engines.base import LaunchSpec
from tuner.errors import UsageError
from tuner.metrics import LevelMetrics
from tuner.objectives import peak_tok_s, single_stream
from tuner.settings import load as load_settings
from tuner.study import TrialRecord, best_record, load_study


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "best",
        help="print the best configuration: systemd unit (default), shell command or JSON",
        description="The best feasible trial of a study, rendered as a complete systemd unit (ExecStart "
        "with the winning flags, one Environment= line per variable), a copy-pasteable shell command, "
        "or JSON.",
    )
    add_study_args(p)
    p.add_argument("--format", choices=("systemd", "shell", "json"), default="systemd")
    p.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")
    p.add_argument(
        "--python",
        metavar="PATH",
        help="absolute interpreter path for the unit's ExecStart on the target host "
        "(default: the space's launch.python, TUNER_PYTHON, else python3 as found here)",
    )
    p.set_defaults(handler=run)


def header_lines(study_name: str, rec: TrialRecord) -> list[str]:
    levels = [LevelMetrics(**lv) for lv in rec.attrs.get("levels", [])]
    lines = [
        f"tuner study {study_name}, trial #{rec.number}",
        f"single-stream {single_stream(levels):.1f} tok/s, peak {peak_tok_s(levels):.1f} tok/s "
        f"(backend {rec.attrs.get('backend', '?')})",
    ]
    lines += [f"  C={lv.concurrency}: {lv.output_tok_s:.1f} tok/s" for lv in levels]
    if len(rec.runs) > 1 and rec.mean is not None:
        trials = ", ".join(f"#{n}" for n in rec.runs)
        lines.append(f"launched {len(rec.runs)} times (trials {trials}): objective mean {rec.mean:.1f} tok/s")
    if rec.estimate is not None:
        lines.append(
            f"estimated objective {rec.estimate:.1f} tok/s (its launches pooled with what its "
            "settings measured in the rest of the study)"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        study = load_study(args.study, args.storage)
    except LookupError as exc:
        raise UsageError(str(exc)) from exc
    rec = best_record(study)
    if rec is None:
        raise UsageError(f"study {study.study_name} has no feasible completed trial yet")
    spec = LaunchSpec(
        argv=rec.attrs["flags"], env=rec.attrs.get("env", {}), engine=study.user_attrs.get("engine", "sglang")
    )
    if args.format == "json":
        text = json.dumps(
            {
                "study": study.study_name,
                "trial": rec.number,
                "value": rec.values[-1] if rec.values else None,
                "values": rec.values,
                "runs": list(rec.runs),
                "mean": rec.mean,
                "estimate": rec.estimate,
                "params": rec.params,
                "argv": spec.argv,
                "flags": flags_only(spec.argv),
                "env": spec.env,
                "levels": rec.attrs.get("levels", []),
                "workload": study.user_attrs.get("workload"),
            },
            indent=2,
        )
    elif args.format == "shell":
        from tuner.units import render_shell

        text = render_shell(spec)
    else:
        from tuner.units import render_systemd_unit

        unit = study.user_attrs.get("unit", {})
        text = render_systemd_unit(
            spec,
            description=unit.get("description")
            or f"{spec.engine} server tuned by tuner ({study.study_name})",
            header=header_lines(study.study_name, rec),
            python=args.python or unit.get("python") or load_settings().python,
            user=unit.get("user"),
            working_directory=unit.get("working_directory"),
            environment_file=unit.get("environment_file"),
        )
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
