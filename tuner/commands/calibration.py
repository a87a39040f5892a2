"""``tuner calibration``: the simulator against the numbers measured on the reference host and
against public measurements of SGLang on other hosts."""

from __future__ import annotations

import argparse

from tuner.sim import calibration


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibration",
        help="print the simulator's calibration tables (model vs measured)",
        description="Run the reference campaign's sweeps on the simulator (noise off) and print them "
        "beside the numbers measured on the reference host; then replay the public bench_serving runs "
        "the simulator is calibrated on (TPOT and TTFT). Exit 1 if a reference cell is off by more than "
        f"{calibration.TOLERANCE:.0%}, a qualitative row fails, or the public points miss their limits.",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    results = calibration.run()
    public = calibration.run_public()
    print(calibration.format_table(results))
    print()
    print(calibration.format_public_table(public))
    ok = calibration.all_within_tolerance(results) and calibration.public_within_tolerance(public)
    return 0 if ok else 1
