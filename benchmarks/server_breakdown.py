"""Where a study's server time goes (simulated, noise on).

    python benchmarks/server_breakdown.py [--space NAME] [--seeds 20] [--budget 40] [--jobs 2]

Runs the default studies of a space (``tuner search --budget 40``: pruning, proxy screening,
confirmation on the target) and splits their simulated server time per study by what it
bought: the start-up of every launch (those that completed, were pruned, or failed to
start), the proxy's levels of completed trials, the target's other levels (the finalists
measured on the whole target), and the levels of pruned trials. Beside it, one launch of
the space's best configuration, noise-free: its start-up, its proxy levels and the whole
target, which is what a launch costs at the least when it is screened and when it is not.

benchmarks/server_time.py compares the total with the same studies measuring every trial
on the whole target; this says which part of the total a change could save: no sampler or
pruning rule touches the start-ups, and a screened launch of the best configuration pays
for the proxy's heaviest level in full.

Results: benchmarks/results/server_breakdown.json (other spaces: server_breakdown-<space>.json).
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import load_best, per_seed, result_name, space_named, sweep, write_result
from _tables import format_table

from studies import STRATEGIES, Job
from tuner.measurers import SIM_STARTUP_S
from tuner.trial_record import TrialRecord

#: The parts of a study's server time, in table order, with their labels.
PARTS = {
    "startup complete": "start-ups of launches that completed",
    "startup pruned": "start-ups of launches that were pruned",
    "startup failed": "start-ups of launches that failed to start",
    "proxy levels": "the proxy's levels of completed trials",
    "target levels": "the target's other levels (finalists)",
    "pruned levels": "the levels of pruned trials, up to the cut",
}

#: One study's server seconds and counts (launches, levels), by part.
Parts = tuple[Counter[str], Counter[str]]


def study_parts(space_name: str, seed: int, budget: int) -> Parts:
    """(server seconds, launches or levels) of one default study, by part (see :data:`PARTS`).
    A launch that ran its levels and missed a constraint (below a floor) counts as completed."""
    space = space_named(space_name)
    proxy = set(space.proxy.levels)
    seconds: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        search = STRATEGIES["tuner"](Job("tuner", seed, budget, space=space_name), tmp)
        search.run()
        for t in search.study.get_trials(deepcopy=False):
            rec = TrialRecord.of(t)
            if not rec.server_s or rec.reused_from is not None:
                continue
            kind = rec.outcome if rec.outcome in ("complete", "pruned", "failed") else "complete"
            seconds[f"startup {kind}"] += rec.startup_s or 0.0
            counts[f"startup {kind}"] += 1
            for level in rec.levels:
                part = (
                    "pruned levels"
                    if kind == "pruned"
                    else "proxy levels"
                    if level["concurrency"] in proxy
                    else "target levels"
                )
                seconds[part] += float(level.get("wall_s", 0.0))
                counts[part] += 1
    return seconds, counts


def best_launch(space_name: str) -> dict[str, float]:
    """Server seconds of one noise-free launch of the space's best configuration: its
    start-up, its proxy levels and the whole target."""
    space = space_named(space_name)
    params = space.complete(load_best(space_name)["params"])
    return {
        "startup_s": SIM_STARTUP_S,
        "proxy_s": sweep(space, params, space.proxy)[1],
        "target_s": sweep(space, params, space.workload)[1],
    }


def analyse(studies: list[Parts], best: dict[str, float], budget: int) -> dict[str, Any]:
    n = len(studies)
    total = sum(sum(s.values()) for s, _ in studies) / n
    rows = {}
    for part, label in PARTS.items():
        seconds = sum(s[part] for s, _ in studies) / n
        rows[part] = {
            "label": label,
            "server_h": seconds / 3600,
            "share": seconds / total if total else 0.0,
            "per_study": sum(c[part] for _, c in studies) / n,
        }
    return {
        "seeds": n,
        "budget": budget,
        "server_h": total / 3600,
        "rows": rows,
        "best_launch": best,
        "screened_best_h": budget * (best["startup_s"] + best["proxy_s"]) / 3600,
        "whole_best_h": budget * (best["startup_s"] + best["target_s"]) / 3600,
    }


def text(summary: dict[str, Any], space: str) -> str:
    rows = [
        [row["label"], f"{row['server_h']:.2f}", f"{row['share']:.0%}", f"{row['per_study']:.1f}"]
        for row in summary["rows"].values()
    ]
    rows.append(["total", f"{summary['server_h']:.2f}", "100%", ""])
    b = summary["best_launch"]
    return "\n".join(
        [
            f"Server time of the default studies of {space} (budget {summary['budget']}, "
            f"{summary['seeds']} seeds, noise on), per study",
            format_table(["part", "server h", "share", "count"], rows),
            f"The space's best configuration, noise-free, per launch: start-up {b['startup_s']:.0f} s, "
            f"proxy levels {b['proxy_s']:.0f} s, whole target {b['target_s']:.0f} s; "
            f"{summary['budget']} launches of it: {summary['screened_best_h']:.2f} h screened, "
            f"{summary['whole_best_h']:.2f} h on the whole target.",
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, studies = per_seed(__doc__, study_parts, argv)
    summary = analyse(studies, best_launch(args.space), args.budget)
    write_result(result_name("server_breakdown", args.space), summary)
    print(text(summary, args.space))
    return summary


if __name__ == "__main__":
    main()
