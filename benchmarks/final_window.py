"""What each kind of trial does to the recommendation (simulated, noise on).

    python benchmarks/final_window.py [--space NAME] [--seeds 20] [--budget 40] [--jobs 2]

Runs the default studies of a space (``tuner search --budget 40``) and sorts every trial by
why it ran: a start point, a new configuration proposed by the sampler (the walk or TPE),
the additive model's pick, a leader measured again on the target workload (a
confirmation), a configuration measured again on the proxy (a re-measurement of the final
window's leaders, or of an outlier), or a launch queued again after the host failed it. For
each kind it reports how many trials it took, where in the budget, their server time, and
what they did to the recommendation: its noise-free share of the space's best before and
after the trial (what ``tuner best`` would say), as a mean change and as the number of
trials that raised or lowered it by more than 0.1 point.

Then, per seed, the split of a miss: a study whose recommendation is not within 2% of the
best either never launched a configuration within 2% (the search did not get there) or
launched one and did not recommend it (the choice under noise missed it); for the latter,
how many launches that configuration had by the end. And per kind, the launches of a
configuration other than the recommendation of the time that is tied with it (noise-free
within :data:`TIE`): whatever such a launch measures, the recommendation's worth cannot
move by more than that. The README's notes on where the recommendation's quality is won
come from these figures.

Results: benchmarks/results/final_window.json (other spaces: final_window-<space>.json).
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
from space_best import true_value

from studies import STRATEGIES, Job, recommendations
from tuner import estimates, resolution, trial_record
from tuner.budget import StudyStopped

#: Kinds of trial, in the order the table shows them.
KINDS = ("start point", "new (walk or TPE)", "model pick", "confirmation", "re-measurement", "queued again")
#: A change of the recommendation's share (of the best) smaller than this is no change.
MOVED = 0.001
#: Two configurations whose noise-free shares of the best are this close are tied: settling
#: their order changes nothing a deployment would notice (a tenth of the 2% the suite judges by).
TIE = 0.002


def kind(t: Any) -> str:
    """Why a trial ran (see the module docstring)."""
    attrs = t.user_attrs
    if trial_record.MODEL_PICK in attrs:
        return "model pick"
    if trial_record.REPEAT_OF in attrs:
        return "confirmation" if attrs.get(trial_record.FIDELITY) == "target" else "re-measurement"
    if "failed_trial" in t.system_attrs:
        return "queued again"  # a launch the host failed or an interruption cut short
    if "fixed_params" in t.system_attrs:
        return "start point"
    return "new (walk or TPE)"


def study_trials(space_name: str, seed: int, budget: int) -> dict[str, Any]:
    """One default study: per trial its kind, server seconds and the recommendation's share of
    the best after it; the share of each launch's configuration; each configuration's launches."""
    space = space_named(space_name)
    best = float(load_best(space_name)["value"])
    truth: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        search = STRATEGIES["tuner"](Job("tuner", seed, budget, space=space_name), tmp)
        with contextlib.suppress(StudyStopped):  # the study ends there, as `tuner search` does
            search.run()
        trials = sorted(search.study.get_trials(deepcopy=False), key=lambda t: t.number)
        recs = recommendations(search.study)

    def share(params: dict[str, Any] | None) -> float:
        return 0.0 if params is None else true_value(space, space.complete(params), truth) / best

    def identity(params: dict[str, Any] | None) -> str | None:
        return None if params is None else resolution.server_key(space, space.complete(params))

    groups = estimates.by_configuration(t for t in trials if estimates.launched(t))
    rows = [
        {
            "number": t.number,
            "kind": kind(t),
            "server_s": trial_record.server_s(t),
            "launched": estimates.launched(t),
            "share": share(dict(t.params)),
            "rec_share": share(rec),
            "launches": len(groups.get(estimates.configuration(t), ())),
            "of_the_recommendation": identity(dict(t.params)) == identity(before),
        }
        for t, rec, before in zip(trials, recs, [None, *recs[:-1]], strict=True)
    ]
    return {"seed": seed, "trials": rows}


def analyse(studies: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind of trial: count, median position, server hours, mean change of the
    recommendation's share and trials that raised or lowered it; per seed the miss split (not
    the trial-by-trial rows: hundreds of kilobytes a space)."""
    per_kind: dict[str, dict[str, Any]] = {
        k: {"trials": 0, "at": [], "server_s": 0.0, "moves": [], "tied": 0} for k in KINDS
    }
    seeds = []
    for s in studies:
        before = 0.0
        for row in s["trials"]:
            k = per_kind[row["kind"]]
            k["trials"] += 1
            k["at"].append(row["number"])
            k["server_s"] += row["server_s"]
            k["moves"].append(row["rec_share"] - before)
            if row["launched"] and not row["of_the_recommendation"] and abs(row["share"] - before) <= TIE:
                k["tied"] += 1
            before = row["rec_share"]
        final = s["trials"][-1]["rec_share"] if s["trials"] else 0.0
        near = [r for r in s["trials"] if r["launched"] and r["share"] >= WITHIN_2]
        seeds.append(
            {
                "seed": s["seed"],
                "share": final,
                "launched_within": bool(near),
                "launches_of_best_launched": max((r["launches"] for r in near), default=0),
            }
        )
    n = max(len(studies), 1)
    kinds = {
        name: {
            "trials_per_study": k["trials"] / n,
            "median_trial": statistics.median(k["at"]) if k["at"] else None,
            "server_h_per_study": k["server_s"] / 3600 / n,
            "mean_change_points": 100 * statistics.fmean(k["moves"]) if k["moves"] else 0.0,
            "raised": sum(m > MOVED for m in k["moves"]),
            "lowered": sum(m < -MOVED for m in k["moves"]),
            "tied_per_study": k["tied"] / n,
        }
        for name, k in per_kind.items()
    }
    missed = [s for s in seeds if s["share"] < WITHIN_2]
    return {
        "seeds": len(studies),
        "within_2": sum(s["share"] >= WITHIN_2 for s in seeds),
        "missed_never_launched": sum(not s["launched_within"] for s in missed),
        "missed_launched": sum(s["launched_within"] for s in missed),
        "missed_launched_once": sum(
            s["launched_within"] and s["launches_of_best_launched"] == 1 for s in missed
        ),
        "kinds": kinds,
        "per_seed": seeds,
    }


def text(summary: dict[str, Any], space: str, budget: int) -> str:
    rows = [
        [
            name,
            f"{k['trials_per_study']:.1f}",
            "" if k["median_trial"] is None else f"{k['median_trial']:g}",
            f"{k['server_h_per_study']:.2f}",
            f"{k['mean_change_points']:+.2f}",
            str(k["raised"]),
            str(k["lowered"]),
            f"{k['tied_per_study']:.1f}",
        ]
        for name, k in summary["kinds"].items()
        if k["trials_per_study"]
    ]
    return "\n".join(
        [
            f"Trials of the default studies of {space} by kind (budget {budget}, {summary['seeds']} seeds, "
            f"noise on); the recommendation's noise-free share of the best before and after each trial",
            format_table(
                [
                    "kind",
                    "trials / study",
                    "median trial #",
                    "server h / study",
                    "mean change (points)",
                    "raised it",
                    "lowered it",
                    "tied / study",
                ],
                rows,
            ),
            f"Within 2% of the best: {summary['within_2']} of {summary['seeds']}. Of the misses, "
            f"{summary['missed_never_launched']} never launched a configuration within 2%; "
            f"{summary['missed_launched']} launched one and recommended another "
            f"({summary['missed_launched_once']} of them had launched it once). Tied: launches of a "
            f"configuration other than the recommendation of the time and within {100 * TIE:g} points of it.",
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, studies = per_seed(__doc__, study_trials, argv)
    summary = analyse(studies)
    write_result(result_name("final_window", args.space), summary)
    print(text(summary, args.space, args.budget))
    return summary


if __name__ == "__main__":
    main()
