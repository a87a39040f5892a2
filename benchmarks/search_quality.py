"""Does `tuner search --budget 40` find the best of the reference space? (noise on)

    python benchmarks/search_quality.py [--seeds 10] [--budget 40]

For each seed, a study runs exactly as `tuner search --budget 40 --seed S` does
(simulator with its default noise, SQLite storage); the configuration it recommends is
then scored noise-free and compared with the best of the space established by
benchmarks/space_best.py (run that first). A seed counts as a hit when its recommendation is
within 2% of that best, the mark of benchmarks/search_efficiency.py and benchmarks/suite.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import load_best, reference_space, space_objective
from space_best import true_value

from tuner.estimates import best_record
from tuner.measurers import SimMeasurer
from tuner.sim.serving import DEFAULT_NOISE
from tuner.study import Search

#: A recommendation this close to the space's best (relative) is a hit.
WITHIN = 0.02


def run_study(
    space, seed: int, budget: int, tmp: str, noise: float = DEFAULT_NOISE, **kw
) -> tuple[Search, float]:
    search = Search(
        space,
        SimMeasurer(space.hardware, space.model, noise=noise),
        study_name=f"s{seed}",
        storage=f"sqlite:///{tmp}/s{seed}.db",
        objective=space_objective(space),
        seed=seed,
        budget=budget,
        **kw,
    )
    t0 = time.perf_counter()
    search.run()
    return search, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--noise", type=float, default=DEFAULT_NOISE)
    args = ap.parse_args()
    space = reference_space()
    best = load_best()
    print(f"best of the space (noise-free): {best['value']:.1f} tok/s")
    cache: dict[str, float] = {}
    hits = 0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            search, wall = run_study(space, seed, args.budget, tmp, args.noise)
            rec = best_record(search.study)
            value = true_value(space, space.complete(rec.params), cache) if rec else 0.0
            gap = 1 - value / best["value"]
            hits += gap <= WITHIN
            trials = search.study.get_trials()
            server_h = sum(float(t.user_attrs.get("server_s", 0)) for t in trials) / 3600
            print(
                f"seed {seed}: recommended trial #{rec.number if rec else '-'} noise-free {value:7.1f} tok/s "
                f"({gap:+.1%} below best)  {'ok' if gap <= WITHIN else 'MISS'}  wall {wall:.1f}s  "
                f"server {server_h:.1f} h"
            )
    print(f"within {WITHIN:.0%} of the best in {hits} of {args.seeds} seeds")


if __name__ == "__main__":
    main()
