"""``tuner calibration``: the simulator against the numbers measured on the reference host."""

from __future__ import annotations

import argparse

from tuner.sim import calibration


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibration",
        help="print the simulator's calibration table (model vs measured)",
        description="Run the reference campaign's sweeps on the simulator (noise off) and print them "
        "beside the numbers measured on the reference host. Exit 1 if a cell is off by more than 10%.",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    results = calibration.run()
    print(calibration.format_table(results))
    return 0 if calibration.all_within_tolerance(results) else 1
