"""``tuner report``: a study as one self-contained HTML page, or its tables as Markdown."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tuner.commands._common import add_study_args, study_storage
from tuner.errors import UsageError

DEFAULT_HTML = Path("report.html")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a study report: one offline HTML page with plots, or Markdown tables",
        description="Summarise a study: top configurations and how they differ from the winner, "
        "optimization history, parameter importances, where pruning cut, single-stream vs peak "
        "(Pareto front, by layout), tok/s against concurrency, and failures by class. The HTML page "
        "embeds plotly.js and opens without a network; --format md prints the tables alone.",
    )
    add_study_args(p)
    p.add_argument(
        "-o",
        "--output",
        help=f"output file, '-' for stdout (default: {DEFAULT_HTML} for html, stdout for md)",
    )
    p.add_argument("--format", choices=("html", "md"), default="html", help="html (default) or md")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tuner import logging as tuner_logging
    from tuner.report import build_report
    from tuner.storage import load_study

    tuner_logging.ensure_setup()
    try:
        study = load_study(args.study, study_storage(args))
    except LookupError as exc:
        raise UsageError(str(exc)) from exc
    try:
        text = build_report(study, args.format)
    except RuntimeError as exc:  # plotly missing
        raise UsageError(str(exc)) from exc
    output = args.output if args.output is not None else (str(DEFAULT_HTML) if args.format == "html" else "-")
    if output == "-":
        sys.stdout.write(text)
        return 0
    path = Path(output)
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path} ({len(text.encode()) / 1e6:.1f} MB): study {study.study_name}", file=sys.stderr)
    return 0
