"""Run-to-run spread of one configuration's measured objective, per suite space (noise on).

    python benchmarks/noise_spread.py [--runs 30] [--spaces a,b] [--jobs 2]

A study judges single changes of a few percent against launches that each carry the host's
run-to-run noise; the tuner assumes :data:`tuner.estimates.NOISE_PRIOR` of it until it has
repeated launches of its own. The simulator's noise (``DEFAULT_NOISE``: a per-launch factor
and per-step jitter, tuner/sim/scheduler.py) reaches the objective through the whole sweep:
the peak of several levels and the scheduler's decisions. This benchmark launches each
space's stored best configuration (benchmarks/results/suite_best/) ``--runs`` times with
launch seeds 0..runs-1 on one request set (as a study's trials serve one), on the space's
proxy and on its target workload, and prints the
relative standard deviation of the objective next to the prior (over the launches that meet
the space's floor; those that miss it are counted), so that the noise a study faces on each
space is a measured figure and not an assumption.

Beside the spread it prints each workload's *speed elasticity*: how many percent the
objective moves per percent of the server's speed (noise off, the launch's speed factor
set to 0.98..1.02: the least-squares slope of log(objective) on log(speed)). A
throughput measured in steady state moves one for one (1.0), and then a launch's 2% speed
noise is 2% of the objective. Where it moves more, the workload amplifies the host's
noise: a closed loop whose window covers a few hundred requests of a short trace counts
whichever of them a faster server reaches, and a KV-bound level admits its queue in
another order.

Results: benchmarks/results/noise_spread.json.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import (
    load_best,
    machine,
    noisy_launches,
    objective_value,
    space_named,
    space_objective,
    write_result,
)
from _tables import format_table
from joblib import Parallel, delayed
from suite import SPACES, spaces_arg

from tuner import estimates
from tuner.sim.model import PerfModel
from tuner.sim.serving import DEFAULT_NOISE, simulate_sweep
from tuner.workload import Workload

#: Launch speed factors (step time x factor) the elasticity is fitted over: +-2%, one
#: launch's noise either way.
ELASTICITY_FACTORS = (0.98, 0.99, 1.0, 1.01, 1.02)


def elasticity(model: PerfModel, workload: Workload, objective: Any) -> float | None:
    """The slope of log(objective) on log(server speed) over :data:`ELASTICITY_FACTORS`,
    noise off; None where a launch misses the space's floor."""
    xs, ys = [], []
    for factor in ELASTICITY_FACTORS:
        value = objective_value(
            objective, simulate_sweep(model, workload, noise=0.0, requests_seed=0, launch_factor=factor)
        )
        if value <= 0:
            return None
        xs.append(-math.log(factor))  # a step 2% longer is a server 2% slower
        ys.append(math.log(value))
    return statistics.linear_regression(xs, ys).slope


def spread(space_name: str, runs: int) -> dict[str, Any]:
    """The best configuration of one space, launched ``runs`` times on its proxy and target."""
    space = space_named(space_name)
    params = space.complete(load_best(space_name, suite=True)["params"])
    spec = space.render(params)
    model = PerfModel.build(space.hardware, space.model, spec.argv, spec.env)
    objective = space_objective(space)
    out: dict[str, Any] = {"space": space_name}
    workloads: dict[str, Workload] = {"proxy": space.proxy, "target": space.workload}
    for label, workload in workloads.items():
        values = noisy_launches(model, workload, objective, runs)
        # A launch that misses the space's floor is worth 0 to the study: counted apart, so
        # that the spread is the measurement's.
        met = [v for v in values if v > 0]
        mean = statistics.fmean(met) if met else 0.0
        out[label] = {
            "mean": mean,
            "sd_share": statistics.stdev(met) / mean if len(met) > 1 else None,
            "min_share": min(met) / mean if met else None,
            "max_share": max(met) / mean if met else None,
            "zero": len(values) - len(met),
        }
    # The target's only: the proxy's peak level is the target's, and it printed the same.
    out["target"]["speed_elasticity"] = elasticity(model, space.workload, objective)
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30, help="launches per configuration and workload")
    ap.add_argument("--spaces", default=",".join(SPACES), help="comma-separated subset of the suite's spaces")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = ap.parse_args(argv)
    if args.runs < 2:
        ap.error("--runs must be at least 2 (a spread needs two launches)")
    names = spaces_arg(ap, args.spaces)
    rows = Parallel(n_jobs=args.jobs)(delayed(spread)(name, args.runs) for name in names)
    summary = {
        "runs": args.runs,
        "noise": DEFAULT_NOISE,
        "noise_prior": estimates.NOISE_PRIOR,
        "spaces": rows,
        "machine": machine(),
    }
    write_result("noise_spread", summary)
    print(
        f"The best configuration of each space, {args.runs} launches per workload "
        f"(seeds 0..{args.runs - 1}); "
        f"simulator noise {DEFAULT_NOISE:.0%} per launch and per step; the study's prior "
        f"(tuner.estimates.NOISE_PRIOR) {estimates.NOISE_PRIOR:.0%}."
    )
    table = [
        [
            r["space"],
            _pct(r["proxy"]["sd_share"]),
            f"{_pct(r['proxy']['min_share'])}..{_pct(r['proxy']['max_share'])}",
            _pct(r["target"]["sd_share"]),
            f"{_pct(r['target']['min_share'])}..{_pct(r['target']['max_share'])}",
            str(r["proxy"]["zero"] + r["target"]["zero"]),
            _ratio(r["target"]["speed_elasticity"]),
        ]
        for r in rows
    ]
    header = [
        "space",
        "proxy sd",
        "proxy range / mean",
        "target sd",
        "target range / mean",
        "below floor",
        "target's speed elasticity",
    ]
    print(format_table(header, table))
    return summary


if __name__ == "__main__":
    main()
