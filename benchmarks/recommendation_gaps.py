"""What the default studies' recommendations miss, knob by knob (simulated, noise on).

    python benchmarks/recommendation_gaps.py [--space NAME] [--seeds 20] [--budget 40] [--jobs 2]

Runs the default studies of a space (``tuner search --budget 40``) and compares each final
recommendation with the space's best configuration (noise-free, stored by
benchmarks/space_best.py). For every parameter the two set differently it measures,
noise-free, what setting that parameter alone to the best's value does to the
recommendation: a gain, a loss, or a configuration that no longer launches or meets the
objective's constraints (the best's value belongs to another basin: a layout that needs
other settings with it). And it says whether any launch of the study that ran to the end
set the best's value of that parameter, in any configuration, and if not, whether a launch
the pruner cut short did.

That splits a miss into kinds that call for different work: a value the study never
launched (search coverage: the order of its moves, the budget), one it launched only in
pruned launches (the pruner's verdict, which also makes a value hopeless to the sampler),
and one it measured and judged wrongly (noise, pooling, the incumbent rule). Per parameter
the table gives the seeds where the recommendation differs from the best, those where the
best's value alone gains more than :data:`WORTH` (and their median gain), how many of those
studies never ran that value to the end, and of those how many had it in pruned launches.

Results: benchmarks/results/recommendation_gaps.json (other spaces:
recommendation_gaps-<space>.json).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import WITHIN_2, load_best, per_seed, result_name, space_named, write_result
from _tables import format_table
from optuna.trial import TrialState
from space_best import true_value

from studies import STRATEGIES, Job
from tuner import estimates
from tuner.budget import StudyStopped

#: A fix worth counting: the best's value alone gains more than 1% over the recommendation
#: (half of the 2% within which a recommendation counts as the best).
WORTH = 0.01


def study_gaps(space_name: str, seed: int, budget: int) -> dict[str, Any]:
    """One default study's recommendation against the space's best: its share of the best
    and, per parameter set differently, the share the best's value alone gives (0 where
    that does not launch or misses a constraint) and whether the study launched it."""
    space = space_named(space_name)
    best = load_best(space_name)
    best_params, best_value = space.complete(best["params"]), float(best["value"])
    truth: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        search = STRATEGIES["tuner"](Job("tuner", seed, budget, space=space_name), tmp)
        with contextlib.suppress(StudyStopped):  # the study ends there, as `tuner search` does
            search.run()
        trials = search.study.get_trials(deepcopy=False)
        pick = estimates.best(trials)  # what `tuner best` recommends at the end
        recommended = dict(pick.trial.params) if pick is not None else None
        launched = [space.complete(dict(t.params)) for t in trials if estimates.launched(t)]
        pruned = [space.complete(dict(t.params)) for t in trials if t.state == TrialState.PRUNED]
    if recommended is None:
        return {"seed": seed, "share": 0.0, "knobs": {}}
    rec = space.complete(recommended)
    share = true_value(space, rec, truth) / best_value
    knobs = {}
    for name in sorted(set(rec) | set(best_params)):
        if repr(rec.get(name)) == repr(best_params.get(name)) or name not in best_params:
            continue
        fixed = space.complete({**rec, name: best_params[name]})
        knobs[name] = {
            "recommended": rec.get(name),
            "best": best_params[name],
            "fixed_share": true_value(space, fixed, truth) / best_value,
            "launched": any(repr(p.get(name)) == repr(best_params[name]) for p in launched),
            "pruned": any(repr(p.get(name)) == repr(best_params[name]) for p in pruned),
        }
    return {"seed": seed, "share": share, "knobs": knobs}


def analyse(studies: list[dict[str, Any]]) -> dict[str, Any]:
    """Per parameter: seeds that differ, seeds where the best's value alone is worth more
    than :data:`WORTH` (median gain), of those the studies that never launched it, and the
    seeds where it alone breaks the recommendation (another basin)."""
    rows: dict[str, dict[str, Any]] = {}
    for s in studies:
        for name, k in s["knobs"].items():
            row = rows.setdefault(
                name, {"differ": 0, "worth": [], "never_launched": 0, "pruned_only": 0, "breaks": 0}
            )
            row["differ"] += 1
            if k["fixed_share"] == 0:
                row["breaks"] += 1
            gain = k["fixed_share"] / s["share"] - 1 if s["share"] > 0 else 0.0
            if gain > WORTH:
                row["worth"].append(gain)
                row["never_launched"] += not k["launched"]
                row["pruned_only"] += not k["launched"] and k["pruned"]
    table = {
        name: {
            "differ": r["differ"],
            "worth_seeds": len(r["worth"]),
            "median_gain": statistics.median(r["worth"]) if r["worth"] else None,
            "never_launched": r["never_launched"],
            "pruned_only": r["pruned_only"],
            "breaks": r["breaks"],
        }
        for name, r in sorted(rows.items(), key=lambda kv: (-len(kv[1]["worth"]), -kv[1]["differ"], kv[0]))
    }
    shares = [s["share"] for s in studies]
    return {
        "seeds": len(studies),
        "within_2": sum(x >= WITHIN_2 for x in shares) / len(shares),
        "median_share": statistics.median(shares),
        "knobs": table,
        "studies": studies,
    }


def text(summary: dict[str, Any], space: str, budget: int) -> str:
    rows = [
        [
            name,
            str(r["differ"]),
            str(r["worth_seeds"]),
            "" if r["median_gain"] is None else f"{r['median_gain']:+.1%}",
            f"{r['never_launched']} ({r['pruned_only']} pruned)"
            if r["pruned_only"]
            else str(r["never_launched"]),
            str(r["breaks"]),
        ]
        for name, r in summary["knobs"].items()
    ]
    return "\n".join(
        [
            f"Recommendations of the default studies of {space} against its best (budget {budget}, "
            f"{summary['seeds']} seeds, noise on): {summary['within_2']:.0%} within 2%, median "
            f"{summary['median_share']:.1%} of the best",
            format_table(
                [
                    "parameter",
                    "differs",
                    f"best's value alone > +{WORTH:.0%}",
                    "median gain",
                    "of those, never run to the end",
                    "alone breaks it",
                ],
                rows,
            ),
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, studies = per_seed(__doc__, study_gaps, argv)
    summary = analyse(studies)
    write_result(result_name("recommendation_gaps", args.space), summary)
    print(text(summary, args.space, args.budget))
    return summary


if __name__ == "__main__":
    main()
