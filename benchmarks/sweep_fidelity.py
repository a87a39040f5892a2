"""Fidelity of shortened sweeps against the full reference sweep, over random configurations.

    python benchmarks/sweep_fidelity.py [--configs 200] [--noise 0]

Full sweep: C=1 at 512 tokens, then 32/64/128/192/256 at 2048 (the reference campaign).
For each candidate short sweep: Spearman rank correlation of its peak with the full
sweep's peak, top-1 agreement, and its server time as a share of the full sweep's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import random_configs, reference_space, spearman, sweep

from tuner.workload import REFERENCE_LEVELS, Workload

FULL = Workload(levels=REFERENCE_LEVELS, max_tokens=2048, single_max_tokens=512)
CANDIDATES = {
    "1@512 64,192@2048": Workload(levels=(1, 64, 192), max_tokens=2048, single_max_tokens=512),
    "1@256 192@1024": Workload(levels=(1, 192), max_tokens=1024, single_max_tokens=256),
    "1@256 128,256@1024": Workload(levels=(1, 128, 256), max_tokens=1024, single_max_tokens=256),
    "1@128 256@768": Workload(levels=(1, 256), max_tokens=768, single_max_tokens=128),
    "1@128 192@512": Workload(levels=(1, 192), max_tokens=512, single_max_tokens=128),
    "1@128 256@1024": Workload(levels=(1, 256), max_tokens=1024, single_max_tokens=128),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--configs", type=int, default=200)
    ap.add_argument("--noise", type=float, default=0.0)
    args = ap.parse_args()
    space = reference_space()
    full_vals, full_time = [], []
    short = {name: ([], []) for name in CANDIDATES}
    for params in random_configs(space, args.configs * 2, seed=7):
        value, t = sweep(space, params, FULL)
        if value is None:
            continue
        full_vals.append(value)
        full_time.append(t)
        for name, wl in CANDIDATES.items():
            v, tt = sweep(space, params, wl, seed=1, noise=args.noise)
            short[name][0].append(v or 0.0)
            short[name][1].append(tt)
        if len(full_vals) >= args.configs:
            break
    best_full = max(range(len(full_vals)), key=full_vals.__getitem__)
    print(f"{len(full_vals)} launchable random configurations of {space.name}; noise {args.noise}")
    print(f"{'short sweep':22s} {'spearman':>8s} {'top-1':>6s} {'time share':>10s}")
    for name, (vals, times) in short.items():
        rho = spearman(full_vals, vals)
        top = max(range(len(vals)), key=vals.__getitem__) == best_full
        share = sum(times) / sum(full_time)
        print(f"{name:22s} {rho:8.3f} {'yes' if top else 'no':>6s} {share:10.1%}")


if __name__ == "__main__":
    main()
