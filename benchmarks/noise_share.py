"""How much of a space's miss the launch noise causes: the default studies with it switched off.

    python benchmarks/noise_share.py [--spaces a,b] [--seeds 20] [--budget 40] [--noise 0,0.01]
        [--jobs 2]

`benchmarks/noise_ceiling.py` asks whether a study that knows the best's neighbourhood can
pick within 2% of the best under the noise (it can, on every space). This asks the other
half: whether the tuner's own studies would find it without the noise. It runs the default
studies of each space (`tuner search`'s trial logic, the suite's seeds and budget) with the
simulator's run-to-run noise at each level of ``--noise`` (a launch's speed and each step's,
:data:`tuner.sim.serving.DEFAULT_NOISE` by default; 0 switches both off), beside the same
studies at the default noise, and scores every recommendation noise-free against the space's
stored best, as `benchmarks/suite.py` does. The studies go through the suite's cache (its
keys carry the noise), so the default-noise rows come from the suite's cache or archive.

Read per space: where the noise-free studies recommend within 2% and the noisy ones do not,
the miss is the noise's (the budget buys too few launches to tell the best's small effects
from a launch's luck); where both miss, the search goes elsewhere whatever it measures.

Results: benchmarks/results/noise_share.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import WITHIN_2, load_best, machine, write_result
from _tables import format_table
from suite import JUDGED, SPACES, TUNE, read_archive, run_cached

from studies import Job
from tuner.sim.serving import DEFAULT_NOISE


def summary(shares: list[float], launched: list[float], server_h: list[float]) -> dict[str, Any]:
    """One space at one noise level: recommendations and launches within 2% of the best."""
    return {
        "seeds": len(shares),
        "within_2": sum(s >= WITHIN_2 for s in shares),
        "launched_2": sum(s >= WITHIN_2 for s in launched),
        "median_share": statistics.median(shares),
        "worst_share": min(shares),
        "server_h": statistics.fmean(server_h),
        "shares": shares,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spaces", default=",".join(SPACES), help="comma-separated (default: the suite's nine)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument(
        "--noise", default="0", help="noise levels beside the default, comma-separated (default: 0)"
    )
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = ap.parse_args(argv)
    spaces = [s.strip() for s in args.spaces.split(",") if s.strip()]
    unknown = [s for s in spaces if s not in SPACES]
    if unknown:
        ap.error(f"not a suite space: {', '.join(unknown)}")
    try:
        levels = sorted({float(x) for x in args.noise.split(",") if x.strip()} - {DEFAULT_NOISE})
    except ValueError:
        ap.error(f"--noise: not a comma-separated list of numbers: {args.noise!r}")
    if any(level < 0 for level in levels):
        ap.error("--noise: a noise level is a share of the speed, 0 or more")
    levels = [*levels, DEFAULT_NOISE]
    best = {s: load_best(s, suite=True)["value"] for s in spaces}
    jobs = [
        Job("tuner", seed, args.budget, noise=n, space=s)
        for s in spaces
        for n in levels
        for seed in range(args.seeds)
    ]
    results = run_cached(jobs, args.jobs, fresh=False, archive=read_archive())
    by: dict[tuple[str, float], list[Any]] = {}
    for r in results:
        by.setdefault((r.job.space, r.job.noise), []).append(r)
    rows: dict[str, dict[str, Any]] = {}
    table = []
    for s in spaces:
        rows[s] = {}
        for n in levels:
            studies = sorted(by[(s, n)], key=lambda r: r.job.seed)
            rows[s][f"{n:g}"] = summary(
                [r.final() / best[s] for r in studies],
                [max(r.trial_value, default=0.0) / best[s] for r in studies],
                [r.server_h() for r in studies],
            )
        split = "TUNE" if s in TUNE else "JUDGED" if s in JUDGED else ""
        cells = [rows[s][f"{n:g}"] for n in levels]
        table.append(
            [s, split]
            + [f"{c['within_2']}/{c['seeds']}" for c in cells]
            + [f"{c['launched_2']}/{c['seeds']}" for c in cells]
            + [f"{100 * c['median_share']:.1f}%" for c in cells]
        )
    names = [f"noise {n:g}" for n in levels]
    print(
        f"Default studies, budget {args.budget}, seeds 0-{args.seeds - 1}, by the simulator's run-to-run "
        f"noise (default {DEFAULT_NOISE:g}); recommendations scored noise-free against each space's best"
    )
    print(
        format_table(
            ["space", "split"]
            + [f"within 2%, {n}" for n in names]
            + [f"launched 2%, {n}" for n in names]
            + [f"median, {n}" for n in names],
            table,
        )
    )
    result = {"budget": args.budget, "seeds": args.seeds, "noise": levels, "spaces": rows}
    write_result("noise_share", {**result, "machine": machine()})
    return result


if __name__ == "__main__":
    main()
