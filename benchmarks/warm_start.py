"""Model-guided start: does a simulator prior, built with a wrong hardware profile, help?

    python benchmarks/warm_start.py [--seeds 20] [--budget 40] [--trials 300] [--jobs 2]

The prior: :func:`tuner.warmstart.predicted_top` (the 5 configurations the simulator ranks
best, noise off) computed with a deliberately mis-specified hardware profile: memory
bandwidth and NCCL all-reduce latency both 20% above the reference host's (a profile
copied from a faster card, and a pessimistic latency guess). The target the studies run
on is the true profile with noise on, so the benchmark does not grade the prior on
itself. Compared: the tuner's default studies, the same with the prior's picks measured
after the space's start points (``Search(extra_start=...)``), and for reference the same
with a prior built from the true profile (the most a prior can give here: optimistic).

Results: benchmarks/results/warm_start.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import WITHIN_2, load_best, reference_space, write_result
from _tables import format_table
from space_best import true_value

from studies import Job, StudyResult, median_or_none, run_jobs
from tuner.profiles import HardwareProfile
from tuner.warmstart import Predictor, predicted_top

#: How far the prior's profile is off: memory bandwidth and all-reduce latency, x1.2 each.
MISSPECIFICATION = 1.2
PICKS = 5


def misspecified(hw: HardwareProfile, factor: float = MISSPECIFICATION) -> HardwareProfile:
    """``hw`` with memory bandwidth and every protocol's all-reduce latency scaled by ``factor``."""
    ic = hw.interconnect
    return hw.model_copy(
        update={
            "id": f"{hw.id}-misspecified",
            "gpu": hw.gpu.model_copy(update={"memory_bandwidth_gbs": hw.gpu.memory_bandwidth_gbs * factor}),
            "interconnect": ic.model_copy(
                update={"latency_us": {k: v * factor for k, v in ic.latency_us.items()}}
            ),
        }
    )


def _prior(hw: HardwareProfile | None, trials: int) -> dict[str, Any]:
    space = reference_space()
    picks = predicted_top(space, hardware_profile=hw, k=PICKS, trials=trials, seed=0)
    predict = Predictor(space, hw)
    return {
        "picks": picks,
        "predicted": [predict(p) for p in picks],
        "true": [true_value(space, space.complete(p)) for p in picks],
    }


def priors(trials: int, n_jobs: int = 2) -> dict[str, dict[str, Any]]:
    """The picks of the mis-specified and of the true-profile prior, with what the prior
    predicted for them and what they are worth on the true host (noise-free, the space's sweep)."""
    from joblib import Parallel, delayed

    profiles = {"misspecified": misspecified(reference_space().hardware_profile), "true": None}
    done = Parallel(n_jobs=n_jobs)(delayed(_prior)(hw, trials) for hw in profiles.values())
    return dict(zip(profiles, done, strict=True))


#: The three groups of studies, in the order :func:`jobs` lists them.
GROUPS = {
    "default": "tuner default",
    "misspecified": "+ model-guided start, mis-specified prior",
    "true": "+ model-guided start, true-profile prior (optimistic)",
}


def jobs(seeds: int, budget: int, prior: dict[str, dict[str, Any]]) -> list[Job]:
    """The default studies, then the same seeds with each prior's picks (see :data:`GROUPS`)."""
    out = [Job("tuner", s, budget) for s in range(seeds)]
    for name in ("misspecified", "true"):
        extra = json.dumps(prior[name]["picks"])
        out += [Job("tuner", s, budget, extra_start=extra) for s in range(seeds)]
    return out


def analyse(
    results: list[StudyResult], best: float, budget: int, prior: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Score the results of :func:`jobs` (same order)."""
    seeds = len(results) // len(GROUPS)
    rows = {}
    for i, (name, label) in enumerate(GROUPS.items()):
        rs = results[i * seeds : (i + 1) * seeds]
        finals = [r.final() for r in rs]
        to2 = [r.trials_to(WITHIN_2 * best) for r in rs]
        rows[name] = {
            "label": label,
            "seeds": len(rs),
            "within_2": sum(v >= WITHIN_2 * best for v in finals) / len(rs),
            "within_5": sum(v >= 0.95 * best for v in finals) / len(rs),
            "median_trials_to_2": median_or_none(to2),
            "reached_2": sum(t is not None for t in to2),
            "server_h_mean": sum(r.server_h() for r in rs) / len(rs),
        }
    for name in ("misspecified", "true"):
        p = prior[name]
        rows[name]["prior_first_true_share"] = p["true"][0] / best if p["true"] else 0.0
        rows[name]["prior_best_true_share"] = max(p["true"], default=0.0) / best
    return {
        "best": best,
        "budget": budget,
        "misspecification": MISSPECIFICATION,
        "prior": prior,
        "rows": rows,
    }


HEADER = [
    "start",
    "prior's pick #1 on the true host",
    "within 2%",
    "within 5%",
    "median trials to 2% (seeds reached)",
    "server h / study",
]


def table_rows(summary: dict[str, Any]) -> list[list[str]]:
    out = []
    for row in summary["rows"].values():
        med = row["median_trials_to_2"]
        first = row.get("prior_first_true_share")
        out.append(
            [
                row["label"],
                "-" if first is None else f"{first:.1%} of best",
                f"{row['within_2']:.0%}",
                f"{row['within_5']:.0%}",
                ("not reached" if med is None else f"{med:g}") + f" ({row['reached_2']}/{row['seeds']})",
                f"{row['server_h_mean']:.1f}",
            ]
        )
    return out


def notes(summary: dict[str, Any]) -> list[str]:
    p = summary["prior"]["misspecified"]
    pairs = ", ".join(f"{pr:.0f} -> {tr:.0f}" for pr, tr in zip(p["predicted"], p["true"], strict=True))
    error = sum(pr / tr - 1 for pr, tr in zip(p["predicted"], p["true"], strict=True)) / max(
        len(p["picks"]), 1
    )
    first = p["true"][0] / summary["best"] if p["true"] else 0.0
    in_order = p["true"] == sorted(p["true"], reverse=True)
    verdict = (
        "its order is right: its first pick is the best of the space on the true host"
        if in_order and first >= 0.999
        else f"its first pick is worth {first:.1%} of the best on the true host"
    )
    return [
        f"Mis-specified prior (memory bandwidth and all-reduce latency x{summary['misspecification']:g}): "
        f"its {len(p['picks'])} picks, predicted -> true tok/s: {pairs} (best of the space "
        f"{summary['best']:.0f}). Its values are {error:+.0%} off on average, yet {verdict}."
    ]


def text(summary: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"Model-guided start (budget {summary['budget']}, "
            f"{summary['rows']['default']['seeds']} seeds, noise on)",
            format_table(HEADER, table_rows(summary)),
            *notes(summary),
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--trials", type=int, default=300, help="predictions per prior (default 300)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = ap.parse_args(argv)
    best = load_best()["value"]
    prior = priors(args.trials, args.jobs)
    summary = analyse(run_jobs(jobs(args.seeds, args.budget, prior), args.jobs), best, args.budget, prior)
    write_result("warm_start", summary)
    print(text(summary))
    return summary


if __name__ == "__main__":
    main()
