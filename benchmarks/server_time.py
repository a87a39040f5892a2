"""Server time saved by pruning, proxy screening and reuse (simulated reference space, noise on).

    python benchmarks/server_time.py [--seeds 20] [--budget 40] [--jobs 2]

The tuner's default studies (``tuner search --budget 40``) against the same studies with
one saving switched off in turn: no pruning (``prune=False``), the reference full sweep
(C=1@512 then 32..256@2048) on every trial instead of screening on the space's proxy, no reuse
(``reuse=False``); and all three off together. Server time per study is the simulated
start-ups plus measured levels of all its trials, mean over seeds, and is reported
relative to the default. Switching a saving off changes what the study learns, so the
trials differ too: the recommendation's noise-free share of the best is shown beside it.

Results: benchmarks/results/server_time.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import WITHIN_2, load_best, write_result
from _tables import format_table, format_targets

from studies import Job, StudyResult, run_jobs

VARIANTS = {
    "tuner": "default: pruning + proxy screening + reuse",
    "no-prune": "no pruning",
    "full-sweep": "every trial on the full target sweep (no proxy screening)",
    "no-reuse": "no reuse",
    "all-off": "all three off",
}
#: Target: the default's server time per study at most this share of all three off.
TARGET_SHARE = 0.40


def jobs(seeds: int, budget: int) -> list[Job]:
    return [Job(name, seed, budget) for name in VARIANTS for seed in range(seeds)]


def analyse(results: list[StudyResult], best: float, budget: int) -> dict[str, Any]:
    by: dict[str, list[StudyResult]] = {}
    for r in results:
        by.setdefault(r.job.strategy, []).append(r)
    rows: dict[str, Any] = {}
    for name, label in VARIANTS.items():
        rs = by[name]
        finals = [r.final() for r in rs]
        launches = [sum(1 for s in r.server_s if s > 0) for r in rs]
        rows[name] = {
            "label": label,
            "seeds": len(rs),
            "server_h_mean": sum(r.server_h() for r in rs) / len(rs),
            "launches_mean": sum(launches) / len(rs),
            "within_2": sum(v >= WITHIN_2 * best for v in finals) / len(rs),
            "median_final_share": float(sorted(finals)[len(finals) // 2] / best),
        }
    default = rows["tuner"]["server_h_mean"]
    for row in rows.values():
        row["relative_to_default"] = row["server_h_mean"] / default
    share = default / rows["all-off"]["server_h_mean"]
    return {
        "best": best,
        "budget": budget,
        "rows": rows,
        "targets": [
            {
                "target": "pruning + proxy screening + reuse cut server time per study to <= 40% "
                "of the same budget without them",
                "met": share <= TARGET_SHARE,
                "figures": f"{default:.1f} h vs {rows['all-off']['server_h_mean']:.1f} h per study "
                f"= {share:.0%}",
            }
        ],
    }


HEADER = ["variant", "server h / study", "vs default", "launches / study", "within 2%", "median rec."]


def table_rows(summary: dict[str, Any]) -> list[list[str]]:
    return [
        [
            row["label"],
            f"{row['server_h_mean']:.1f}",
            f"{row['relative_to_default']:.2f}x",
            f"{row['launches_mean']:.1f}",
            f"{row['within_2']:.0%}",
            f"{row['median_final_share']:.1%}",
        ]
        for row in summary["rows"].values()
    ]


def notes(summary: dict[str, Any]) -> list[str]:
    rows = summary["rows"]
    out = []
    if (
        abs(rows["no-reuse"]["server_h_mean"] - rows["tuner"]["server_h_mean"]) < 1e-9
        and rows["no-reuse"]["launches_mean"] == rows["tuner"]["launches_mean"]
    ):
        out.append(
            "Reuse saved nothing in these studies: with it off they launch exactly as often, so no "
            "measured configuration was proposed again (the sampler's local moves skip measured ones)."
        )
    return out


def text(summary: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"Server time per study (budget {summary['budget']}, "
            f"{summary['rows']['tuner']['seeds']} seeds, noise on)",
            format_table(HEADER, table_rows(summary)),
            *notes(summary),
            format_targets(summary["targets"]),
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = ap.parse_args(argv)
    best = load_best()["value"]
    summary = analyse(run_jobs(jobs(args.seeds, args.budget), args.jobs), best, args.budget)
    write_result("server_time", summary)
    print(text(summary))
    return summary


if __name__ == "__main__":
    main()
