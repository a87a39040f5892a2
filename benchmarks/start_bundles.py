"""What a space's start points give a study, and what one value among them can hide.

    python benchmarks/start_bundles.py [--space NAME] [--without PARAM] [--seeds 20] [--budget 40]
        [--jobs 2]

A start point that sets several values at once is, to the study's additive model, one
bundle: the launches that measured it cannot say which of its values made it fast or slow.
The reference space's list (the reference campaign's hand-picked configurations) sets
``NCCL_PROTO=LL`` together with 8 decode steps, more NCCL channels and threads and 16 MiB
buffers; on the trace space's workload LL alone costs more than half the throughput, and the
values that ride with it are three of the best configuration's. This benchmark runs the
default study of a space (budget 40, noise on, each seed) from three start lists:

* ``as written``: the space's own list;
* ``without PARAM``: the same list with ``PARAM`` left unset in every start point (the
  engine's default): the same knowledge, less the one value;
* ``engine defaults``: no list at all, the engine's defaults under each layout that fits
  (what a space without ``start:`` gets, :func:`tuner.start_points.defaults`).

Each recommendation is scored noise-free against the space's stored best, as the suite
scores it (a start list changes where a study begins, not what the space holds). Printed per
list: recommendations within 2% of the best, studies that launched a configuration within 2%
at all (any trial's configuration), the median and lowest recommendation as a share of the best.

Results: benchmarks/results/start_bundles-<space>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import WITHIN_2, load_best, machine, result_name, space_named, write_result
from _tables import format_table
from space_best import true_value

from studies import Job, tuner_study
from tuner import estimates
from tuner.space import Space
from tuner.study import StudyStopped

DEFAULT_SPACE = "kimi-k2.6-8x-rtx-pro-6000-trace"
DEFAULT_WITHOUT = "nccl_proto"
AS_WRITTEN, ENGINE_DEFAULTS = "as written", "engine defaults"


def start_list(space: Space, variant: str, without: str) -> Space:
    """``space`` with the start list of ``variant`` (see the module docstring)."""
    if variant == AS_WRITTEN:
        return space
    start = [] if variant == ENGINE_DEFAULTS else [
        {k: v for k, v in point.items() if k != without} for point in space.spec.start
    ]  # fmt: skip
    # The workload as loaded: its trace path is resolved against the space file already.
    spec = space.spec.model_copy(update={"start": start, "workload": space.workload})
    return Space(spec, source=space.source)


def variants(without: str) -> list[str]:
    return [AS_WRITTEN, f"without {without}", ENGINE_DEFAULTS]


def one_study(space_name: str, variant: str, without: str, seed: int, budget: int) -> dict[str, Any]:
    """One default study from the variant's start list: its recommendation's share of the
    best and the best share it launched (both noise-free)."""
    space = start_list(space_named(space_name), variant, without)
    best = load_best(space_name, suite=True)["value"]
    truth: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        search = tuner_study(Job("tuner", seed, budget, space=space_name), tmp, space)
        with contextlib.suppress(StudyStopped):  # the study ends there, as `tuner search` does
            search.run()
        trials = search.study.get_trials(deepcopy=False)
        pick = estimates.best(trials)
        # Every trial's configuration, as the suite counts "launched within 2%" (one the rules
        # refuse is worth 0).
        launched = [dict(t.params) for t in trials]
    rec = 0.0 if pick is None else true_value(space, space.complete(dict(pick.trial.params)), truth) / best
    top = max((true_value(space, space.complete(p), truth) / best for p in launched), default=0.0)
    return {"variant": variant, "seed": seed, "share": rec, "launched": top}


def summarise(rows: list[dict[str, Any]], names: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for name in names:
        mine = sorted((r for r in rows if r["variant"] == name), key=lambda r: r["seed"])
        shares = [r["share"] for r in mine]
        out[name] = {
            "seeds": len(mine),
            "within_2": sum(s >= WITHIN_2 for s in shares),
            "launched_2": sum(r["launched"] >= WITHIN_2 for r in mine),
            "median_share": statistics.median(shares),
            "worst_share": min(shares),
            "shares": shares,
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", default=DEFAULT_SPACE, help="a space of the project or of the suite")
    ap.add_argument("--without", default=DEFAULT_WITHOUT, help="the parameter the second list leaves unset")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = ap.parse_args(argv)
    space = space_named(args.space)
    if not space.spec.start:
        ap.error(f"{args.space} has no start list to compare")
    if args.without not in space.parameters:
        ap.error(f"{args.space} has no parameter {args.without!r}")
    load_best(args.space, suite=True)
    names = variants(args.without)
    from joblib import Parallel, delayed

    rows = Parallel(n_jobs=args.jobs)(
        delayed(one_study)(args.space, name, args.without, seed, args.budget)
        for name in names
        for seed in range(args.seeds)
    )
    summary = summarise(list(rows), names)
    table = [
        [
            name,
            f"{s['within_2']}/{s['seeds']}",
            f"{s['launched_2']}/{s['seeds']}",
            f"{100 * s['median_share']:.1f}%",
            f"{100 * s['worst_share']:.1f}%",
        ]
        for name, s in summary.items()
    ]
    print(f"{args.space}: the default study (budget {args.budget}, noise on) from three start lists")
    print(format_table(["start list", "within 2%", "launched 2%", "median", "worst"], table))
    result = {"space": args.space, "without": args.without, "budget": args.budget, "variants": summary}
    write_result(result_name("start_bundles", args.space), {**result, "machine": machine()})
    return result


if __name__ == "__main__":
    main()
