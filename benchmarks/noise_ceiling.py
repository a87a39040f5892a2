"""How often a study could end within 2% of a space's best, given the host's run-to-run noise.

    python benchmarks/noise_ceiling.py [--spaces a,b] [--runs 16] [--draws 4000] [--jobs 2]

The suite's targets ask for a recommendation within 2% of the best in 90% of seeds. Where
configurations a little further than 2% from the best sit next to it, and a launch's
objective moves by about as much from run to run, no study can tell them apart in a few
launches, however well it searches. This benchmark puts a figure on that, per space.

The *contenders* are the space's stored best (benchmarks/results/suite_best/) and every
configuration one parameter away from it (the neighbourhood a study that found the best
ends in) that is worth at least :data:`CONTENDER_BAND` of the best, noise-free, on the
target workload. Each is launched ``--runs`` times with noise on (launch seeds 0..runs-1,
one request set, as a study's trials serve one: benchmarks/noise_spread.py's setting), and
three ideal studies are replayed ``--draws`` times from those launches:

* **each contender n times** (n = 1, 2, 4), the highest mean recommended: a study that has
  found every contender and spends n launches on each;
* **once each, then the leader re-measured** :data:`FINAL_WINDOW` times (what a study's
  final window does: the contender with the highest mean is launched again);
* **once each, then the highest upper bound re-measured** :data:`FINAL_WINDOW` times (mean
  plus one standard error of the launches, so an unlucky single launch gets another look).

Each prints the share of draws whose recommendation is within 2% of the best. These are
*ceilings*, and optimistic ones: the ideal studies know the neighbourhood (a study has to
find it, in the same 40 launches), and only one-parameter neighbours count as contenders (a
study meets others). Where a ceiling is below the suite's 90%, the target cannot be met at
that budget on that space by better search alone.

Results: benchmarks/results/noise_ceiling.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import _blas  # noqa: F401  (before numpy: pins OpenBLAS's kernels)
import numpy as np
from _common import WITHIN_2, load_best, machine, noisy_launches, space_named, space_objective, write_result
from _tables import format_table
from joblib import Parallel, delayed
from space_best import true_value
from suite import JUDGED, SPACES, spaces_arg

from tuner.failures import LaunchFailure
from tuner.sim.model import PerfModel
from tuner.sim.serving import DEFAULT_NOISE
from tuner.space import Space

#: Noise-free share of the best a configuration needs to be a contender: the configurations
#: a study could mistake for the best within a few launches at 2-3% run-to-run noise.
CONTENDER_BAND = 0.95
#: Launches each contender gets in the equal-allocation studies.
EQUAL_LAUNCHES = (1, 2, 4)
#: Re-measurements after one launch of each contender: a study's final window (about two
#: confirmations and three re-measurements per study, benchmarks/final_window.py).
FINAL_WINDOW = 5


def contenders(space: Space, best: dict[str, Any]) -> list[tuple[dict[str, Any], float]]:
    """The best and its one-parameter neighbours worth at least :data:`CONTENDER_BAND` of it
    (noise-free, target workload), each with its share of the best, best first."""
    truth: dict[str, float] = {}
    top = true_value(space, best, truth)
    found = {space.key(best): (best, 1.0)}
    for name, values in space.value_lists().items():
        for value in values:
            params = space.complete({**best, name: value})
            key = space.key(params)
            if key in found:
                continue
            share = true_value(space, params, truth) / top
            if share >= CONTENDER_BAND:
                found[key] = (params, share)
    return sorted(found.values(), key=lambda c: -c[1])


def launches(space: Space, params: dict[str, Any], runs: int) -> list[float]:
    """The objective of ``runs`` noisy launches of one configuration on the target (0 for a
    launch that misses the space's floor)."""
    spec = space.render(params)
    try:
        model = PerfModel.build(space.hardware, space.model, spec.argv, spec.env)
    except LaunchFailure:
        return [0.0] * runs
    return noisy_launches(model, space.workload, space_objective(space), runs)


def equal_allocation(
    values: np.ndarray, hits: np.ndarray, n: int, draws: int, rng: np.random.Generator
) -> float:
    """Share of draws in which n launches of every contender (drawn without replacement from
    its measured ones) put a hit on top by their mean."""
    k, runs = values.shape
    order = rng.random((draws, k, runs)).argsort(axis=2)[:, :, :n]
    means = np.take_along_axis(np.broadcast_to(values, (draws, k, runs)), order, axis=2).mean(axis=2)
    return float(hits[means.argmax(axis=1)].mean())


def sequential(
    values: np.ndarray, hits: np.ndarray, extra: int, draws: int, rng: np.random.Generator, *, by_upper: bool
) -> float:
    """Share of draws in which one launch of every contender and ``extra`` more, each given
    to the leader by mean (or, ``by_upper``, by mean plus one standard error at the measured
    noise), put a hit on top by mean."""
    k, runs = values.shape
    noise = float(np.std(values / values.mean(axis=1, keepdims=True), ddof=1)) if runs > 1 else 0.0
    won = 0
    for _ in range(draws):
        order = rng.random((k, runs)).argsort(axis=1)
        taken = np.ones(k, dtype=int)
        sums = values[np.arange(k), order[:, 0]].copy()
        for _ in range(extra):
            means = sums / taken
            rank = means * (1.0 + noise / np.sqrt(taken)) if by_upper else means
            i = int(rank.argmax())
            if taken[i] >= runs:
                break
            sums[i] += values[i, order[i, taken[i]]]
            taken[i] += 1
        won += bool(hits[int((sums / taken).argmax())])
    return won / draws


def ceiling(space_name: str, runs: int, draws: int) -> dict[str, Any]:
    """One space's contenders, their launches and the ideal studies' hit shares."""
    space = space_named(space_name)
    best = space.complete(load_best(space_name, suite=True)["params"])
    found = contenders(space, best)
    values = np.array([launches(space, params, runs) for params, _ in found])
    shares = np.array([share for _, share in found])
    hits = shares >= WITHIN_2
    rng = np.random.default_rng(0)
    top = values[0][values[0] > 0]  # the best's launches that met the space's floor
    below = shares[~hits]
    return {
        "space": space_name,
        "judged": space_name in JUDGED,
        "contenders": len(found),
        "within": int(hits.sum()),
        "nearest_miss": float(below.max()) if below.size else None,
        "noise": float(np.std(top / top.mean(), ddof=1)) if top.size > 1 else None,
        "equal": {str(n): equal_allocation(values, hits, n, draws, rng) for n in EQUAL_LAUNCHES},
        "leader_remeasured": sequential(values, hits, FINAL_WINDOW, draws, rng, by_upper=False),
        "upper_remeasured": sequential(values, hits, FINAL_WINDOW, draws, rng, by_upper=True),
        "shares": [round(float(s), 4) for s in shares],
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spaces", default=",".join(SPACES), help="comma-separated subset of the suite's spaces")
    ap.add_argument("--runs", type=int, default=16, help="noisy launches per contender (default 16)")
    ap.add_argument("--draws", type=int, default=4000, help="replays of each ideal study (default 4000)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = ap.parse_args(argv)
    needed = max(*EQUAL_LAUNCHES, 1 + FINAL_WINDOW)
    if args.runs < needed:
        ap.error(
            f"--runs must be at least {needed} (the ideal studies draw that many launches of one contender)"
        )
    if args.draws < 1:
        ap.error("--draws must be at least 1")
    names = spaces_arg(ap, args.spaces)
    rows = Parallel(n_jobs=args.jobs)(delayed(ceiling)(name, args.runs, args.draws) for name in names)
    summary = {
        "runs": args.runs,
        "draws": args.draws,
        "contender_band": CONTENDER_BAND,
        "final_window": FINAL_WINDOW,
        "noise": DEFAULT_NOISE,
        "spaces": rows,
        "machine": machine(),
    }
    write_result("noise_ceiling", summary)
    print(
        f"Contenders: each space's best and its one-parameter neighbours worth >= {CONTENDER_BAND:.0%} of it "
        f"(noise-free, target); {args.runs} noisy launches each, {args.draws} replays per ideal study. "
        f"Share of replays whose recommendation is within {1 - WITHIN_2:.0%} of the best:"
    )
    header = [
        "space",
        "contenders (within 2%)",
        "nearest below 2%",
        "run-to-run sd",
        *(f"{n} launch{'es' if n > 1 else ''} each" for n in EQUAL_LAUNCHES),
        f"1 each + {FINAL_WINDOW} on the leader",
        f"1 each + {FINAL_WINDOW} on the upper bound",
    ]
    table = [
        [
            f"{r['space']}{' (judged)' if r['judged'] else ''}",
            f"{r['contenders']} ({r['within']})",
            _pct(r["nearest_miss"]) if r["nearest_miss"] is None else f"{100 * r['nearest_miss']:.1f}%",
            _pct(r["noise"]) if r["noise"] is None else f"{100 * r['noise']:.1f}%",
            *(_pct(r["equal"][str(n)]) for n in EQUAL_LAUNCHES),
            _pct(r["leader_remeasured"]),
            _pct(r["upper_remeasured"]),
        ]
        for r in rows
    ]
    print(format_table(header, table))
    return summary


if __name__ == "__main__":
    main()
