"""Search efficiency: the tuner against its peers on a simulated space (noise on).

    python benchmarks/search_efficiency.py [--space NAME] [--seeds 20] [--budget 40]
        [--random-budget 120] [--strategies tuner,random,...] [--jobs 2]

For each strategy (see benchmarks/studies.py) and seed, one study with a budget of
``--budget`` trials (the fixed lists: their length), and every figure is taken when that
budget is used up, as ``tuner search`` counts it: rejected proposals do not count. Scored
per strategy:

* within 2% / 5%: share of seeds whose recommended configuration (as ``tuner best``
  picks it: tuner/estimates.py) is, noise-free, within 2% / 5% of the best of the space
  (benchmarks/results/space_best.json; run benchmarks/space_best.py first);
* median trials to 2%: the budget used (launches and reuses; a proposal the rules reject
  is free, see tuner/budget.py) when the configuration recommended at that point first is
  within 2% of the best (noise-free), median over seeds; a seed that never gets there
  counts as infinitely many, so the median is "not reached" when half miss;
* server h: simulated server time per study (start-ups + measured levels), mean over seeds;
  the tuner's is compared with the same studies measuring every trial on the whole target
  workload without pruning or reuse (``all-off``).

Recommendations are scored on the space's target workload (for the reference space, the
reference campaign's full sweep), whatever the strategy measured its trials on.

Random search runs ``--random-budget`` trials so that the number of trials it needs can
be measured, or bounded from below; its budget-40 figures are those studies' first 40
launches (random draws do not depend on earlier results). The hit rate of one random
draw (every configuration random search drew, scored noise-free) gives the expected
median for comparison.

Results: benchmarks/results/search_efficiency.json (other spaces: search_efficiency-<space>.json).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import WITHIN_2, load_best, result_name, share_text, write_result
from _tables import format_table, format_targets

from studies import GRID, HANDPICKED, Job, StudyResult, median_or_none, run_jobs

#: Strategies of this benchmark, in table order, with their labels.
STRATEGIES = {
    "tuner": "tuner default (`tuner search`)",
    "random": "random search",
    "grid": f"tiered grid, {len(GRID)} candidates (SGLang auto_benchmark style)",
    "tpe": "plain TPE, failures just fail (auto-tuning-vllm style)",
    "handpicked": f"hand-picked list, {len(HANDPICKED)} configs (reference campaign)",
    "all-off": "tuner, every trial on the whole target, no pruning, no reuse",
}
#: The targets this benchmark checks.
TARGET_WITHIN_2 = 0.90
TARGET_TRIALS_RATIO = 0.5
TARGET_SERVER_SHARE = 0.40
REFERENCE = "kimi-k2.6-8x-rtx-pro-6000"


def jobs(
    seeds: int, budget: int, random_budget: int, space: str = REFERENCE, strategies: list[str] | None = None
) -> list[Job]:
    out = []
    for name in strategies or STRATEGIES:
        b = max(budget, random_budget) if name == "random" else budget
        out += [Job(name, seed, b, space=space) for seed in range(seeds)]
    return out


def score(results: list[StudyResult], best: float, budget: int | None) -> dict[str, Any]:
    """The table row of one strategy: its studies scored when ``budget`` is used up."""
    finals = [r.final(budget) for r in results]
    to2 = [r.launches_to(WITHIN_2 * best, budget) for r in results]
    return {
        "seeds": len(results),
        "trials": max(len(r.rec_value[: r.trials_within(budget)]) for r in results),
        "within_2": sum(v >= WITHIN_2 * best for v in finals) / len(results),
        "within_5": sum(v >= 0.95 * best for v in finals) / len(results),
        "median_final_share": float(sorted(finals)[len(finals) // 2] / best),
        "median_trials_to_2": median_or_none(to2),
        "reached_2": sum(t is not None for t in to2),
        "trials_to_2": to2,
        "server_h_mean": sum(r.server_h(budget) for r in results) / len(results),
        "final_values": finals,
    }


def analyse(results: list[StudyResult], best: float, budget: int, random_budget: int) -> dict[str, Any]:
    by: dict[str, list[StudyResult]] = {}
    for r in results:
        by.setdefault(r.job.strategy, []).append(r)
    rows = {}
    for name, label in STRATEGIES.items():
        if name in by:
            rows[name] = {"label": label, **score(by[name], best, budget)}
    if "random" in by:
        rows["random"].update(_random_extras(by["random"], best))
    return {
        "best": best,
        "budget": budget,
        "random_budget": random_budget,
        "rows": rows,
        "targets": targets(rows),
    }


def _random_extras(results: list[StudyResult], best: float) -> dict[str, Any]:
    """Random search beyond the budget (its median trials to 2%) and the hit rate of one draw."""
    extended = score(results, best, None)
    drawn = [v for r in results for v in (r.trial_value or [])]
    hits = sum(v >= WITHIN_2 * best for v in drawn)
    p = hits / len(drawn) if drawn else 0.0
    return {
        "extended": {k: extended[k] for k in ("trials", "median_trials_to_2", "reached_2", "trials_to_2")},
        "hit_rate": {
            "hits": hits,
            "draws": len(drawn),
            # Trials until the first hit is geometric: its median is ln 2 / -ln(1 - p).
            "expected_median_trials": (math.log(0.5) / math.log(1 - p)) if 0 < p < 1 else None,
        },
    }


def targets(rows: dict[str, Any]) -> list[dict[str, Any]]:
    tuner = rows["tuner"]
    within = tuner["within_2"]
    out = [
        {
            "target": f"tuner default within 2% of the best in >= {TARGET_WITHIN_2:.0%} of seeds",
            "met": within >= TARGET_WITHIN_2,
            "figures": share_text(within, tuner["seeds"]),
        }
    ]
    if "all-off" in rows:
        share = tuner["server_h_mean"] / rows["all-off"]["server_h_mean"]
        out.append(
            {
                "target": f"server time <= {TARGET_SERVER_SHARE:.0%} of measuring every trial on the whole "
                "target (no pruning, no reuse)",
                "met": share <= TARGET_SERVER_SHARE,
                "figures": f"{tuner['server_h_mean']:.1f} h vs {rows['all-off']['server_h_mean']:.1f} h per "
                f"study = {share:.0%}",
            }
        )
    if "random" not in rows:
        return out
    rnd = rows["random"]
    t_med = tuner["median_trials_to_2"]
    r_med = rnd["extended"]["median_trials_to_2"]
    r_bound = rnd["extended"]["trials"]  # random's median is beyond this when not reached
    if t_med is None:
        ratio_ok, figures = False, "tuner median not reached within the budget"
    elif r_med is None:
        ratio_ok = t_med <= TARGET_TRIALS_RATIO * r_bound
        figures = f"tuner {t_med:g} vs random > {r_bound} (not reached by half the seeds in {r_bound} trials)"
    else:
        ratio_ok = t_med <= TARGET_TRIALS_RATIO * r_med
        figures = f"tuner {t_med:g} vs random {r_med:g} (ratio {t_med / r_med:.2f})"
    out.append(
        {
            "target": "tuner needs at most half the trials random search needs to get within 2% (median)",
            "met": ratio_ok,
            "figures": figures,
        }
    )
    return out


def _med(v: float | None, reached: int, seeds: int, bound: int | None = None) -> str:
    if v is None:
        return f"not reached ({reached}/{seeds})" if bound is None else f"> {bound} ({reached}/{seeds})"
    return f"{v:g} ({reached}/{seeds})"


def table_rows(summary: dict[str, Any]) -> list[list[str]]:
    """Rows of the results table: strategy, trials, within 2%, within 5%, median rec.,
    median trials to 2% (seeds that got there), server h per study."""
    out = []
    for row in summary["rows"].values():
        med = _med(row["median_trials_to_2"], row["reached_2"], row["seeds"])
        if "extended" in row:
            ext = row["extended"]
            med += f"; in {ext['trials']}: " + _med(
                ext["median_trials_to_2"], ext["reached_2"], row["seeds"], bound=ext["trials"]
            )
        out.append(
            [
                row["label"],
                str(row["trials"]),
                f"{row['within_2']:.0%}",
                f"{row['within_5']:.0%}",
                f"{row['median_final_share']:.1%}",
                med,
                f"{row['server_h_mean']:.1f}",
            ]
        )
    return out


HEADER = [
    "strategy",
    "trials",
    "within 2%",
    "within 5%",
    "median rec. (share of best)",
    "median trials to 2% (seeds reached)",
    "server h / study",
]


def notes(summary: dict[str, Any]) -> list[str]:
    if "random" not in summary["rows"]:
        return []
    hr = summary["rows"]["random"]["hit_rate"]
    exp = hr["expected_median_trials"]
    tuner = summary["rows"]["tuner"]
    shares = sorted(v / summary["best"] for v in tuner["final_values"])
    near = sum(0.97 <= s < WITHIN_2 for s in shares)
    return [
        f"Tuner default, recommendations of the {len(shares)} seeds: lowest {shares[0]:.1%} of the best, "
        f"median {shares[len(shares) // 2]:.1%}; {near} between 2% and 3% below the best. "
        f"Random draws within 2% of the best: {hr['hits']} of {hr['draws']}"
        + (f" (expected median trials to the first: ~{exp:.0f})" if exp else "")
        + "."
    ]


def text(summary: dict[str, Any]) -> str:
    lines = [
        f"Search efficiency: best of the space {summary['best']:.1f} tok/s (noise-free); "
        f"budget {summary['budget']}, {summary['rows']['tuner']['seeds']} seeds per strategy, noise on",
        format_table(HEADER, table_rows(summary)),
        *notes(summary),
        format_targets(summary["targets"]),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--random-budget", type=int, default=120)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument(
        "--space", default=REFERENCE, help="a space of the project (default: the reference space)"
    )
    ap.add_argument(
        "--strategies", default=",".join(STRATEGIES), help="comma-separated subset (tuner is always run)"
    )
    args = ap.parse_args(argv)
    wanted = ["tuner", *[s for s in args.strategies.split(",") if s and s != "tuner"]]
    unknown = sorted(set(wanted) - set(STRATEGIES))
    if unknown:
        ap.error(f"unknown strategies: {', '.join(unknown)} (known: {', '.join(STRATEGIES)})")
    best = load_best(args.space)["value"]
    results = run_jobs(jobs(args.seeds, args.budget, args.random_budget, args.space, wanted), args.jobs)
    summary = analyse(results, best, args.budget, args.random_budget)
    summary["space"] = args.space
    write_result(result_name("search_efficiency", args.space), summary)
    print(text(summary))
    return summary


if __name__ == "__main__":
    main()
