"""How often does pruning cut a configuration that was actually good?

    python benchmarks/false_prunes.py [--seeds 10]

Runs `tuner search --budget 40` studies (simulator, noise on) and scores every pruned
trial noise-free on the full reference sweep (C=1@512, 32..256@2048). A false prune is a
pruned configuration whose full-sweep peak is within 5% of the best full-sweep peak seen
among all configurations these studies measured.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import reference_space, sweep
from optuna.trial import TrialState
from search_quality import run_study
from sweep_fidelity import FULL


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args()
    space = reference_space()
    full: dict[str, float] = {}
    pruned: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            search, _ = run_study(space, seed, 40, tmp)
            for t in search.study.get_trials():
                if t.state not in (TrialState.COMPLETE, TrialState.PRUNED) or "reused_from" in t.user_attrs:
                    continue
                params = space.complete(t.params)
                key = space.key(params)
                if key not in full:
                    full[key] = sweep(space, params, FULL)[0] or 0.0
                if t.state == TrialState.PRUNED:
                    pruned.append(key)
    best = max(full.values())
    false = [k for k in pruned if full[k] >= 0.95 * best]
    closest = max((full[k] / best for k in pruned), default=0.0)
    print(f"{args.seeds} studies: {len(pruned)} pruned trials, best full-sweep peak {best:.0f} tok/s")
    print(
        f"false prunes (within 5% of the best): {len(false)} ({len(false) / max(len(pruned), 1):.1%}); "
        f"the best pruned configuration reached {closest:.0%} of the best"
    )


if __name__ == "__main__":
    main()
