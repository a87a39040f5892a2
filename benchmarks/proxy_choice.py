"""How the default proxy was chosen: candidate screening workloads judged at the top.

    python benchmarks/proxy_choice.py [--space NAME] [--random 60] [--near 80] [--jobs 2]

A study screens its trials on a proxy of the space's target workload (tuner/fidelity.py)
and measures only its finalists on the target. What decides whether a proxy works is
whether its top picks are the target's top picks, so each candidate is judged, noise off,
over random launchable configurations and near-best ones (the space's best with one to
three parameters redrawn: the region a study ends in), by

* pick: the target value of the proxy's top configuration, as a share of the target's best;
* top-3 confirmed: the best target value among the proxy's top 3 (what confirming three
  finalists on the target recovers);
* recall: the share of the target's top 5 among the proxy's top 10;
* cost: the proxy's measured time (levels only) as a share of the target's.

Rank correlation over random configurations is printed too, to show what it hides.
Results: benchmarks/results/proxy_choice*.json.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import launchable, load_best, random_configs, result_name, space_named, spearman, write_result
from _tables import format_table

from tuner import fidelity
from tuner.metrics import summarize
from tuner.objectives import Objective
from tuner.sim.model import PerfModel
from tuner.sim.serving import simulate_sweep
from tuner.space import Space
from tuner.workload import Workload

REFERENCE = "kimi-k2.6-8x-rtx-pro-6000"


def _levels(target: Workload, levels: tuple[int, ...], **update: Any) -> Workload:
    return target.model_copy(update={"levels": levels, **update})


def candidates(target: Workload) -> dict[str, Workload]:
    """Screening workloads derived from ``target`` in the ways a person would shorten it."""
    heavy = fidelity.heaviest_level(target)
    multi = [c for c in target.levels if c > 1]
    out = {"derived: single + heaviest (default)": fidelity.derive_proxy(target)}
    if target.kind == "trace":
        out["heaviest, half the window"] = _levels(target, (heavy,), duration_s=target.duration_s / 2)
        out["lowest level"] = _levels(target, (min(target.levels),))
        out["all levels, a quarter of the window"] = target.model_copy(
            update={"duration_s": target.duration_s / 4}
        )
        return out
    single = (1,) if 1 in target.levels else ()
    out["single + heaviest, half the reply length"] = _levels(
        target,
        (*single, heavy),
        max_tokens=max(1, target.max_tokens // 2),
        single_max_tokens=max(1, target.single_max_tokens // 4),
    )
    out["single + heaviest at a short C=1"] = _levels(
        target, (*single, heavy), single_max_tokens=min(128, target.single_max_tokens)
    )
    if len(multi) >= 2:
        second = sorted(multi)[-2]
        out["single + the level below the heaviest"] = _levels(target, (*single, second))
    out["earlier default: C=1@128, heaviest@1024"] = _levels(
        target, (*single, heavy), max_tokens=1024, single_max_tokens=128
    )
    unique: dict[str, Workload] = {}
    for name, wl in out.items():  # two derivations can give one workload: judge it once
        if wl not in unique.values():
            unique[name] = wl
    return unique


def _value(space: Space, params: dict[str, Any], wl: Workload) -> tuple[float, float]:
    """(objective value, measured seconds) of one configuration on ``wl``, noise off."""
    spec = space.render(params)
    model = PerfModel.build(space.hardware, space.model, spec.argv, spec.env)
    levels = [summarize(lv) for lv in simulate_sweep(model, wl, seed=0, noise=0.0)]
    value = Objective(name=space.objective.name).value(levels)
    return float(value), sum(m.wall_s for m in levels)  # type: ignore[arg-type]


def draw(space: Space, n_random: int, n_near: int) -> tuple[list[dict], list[dict]]:
    """Random launchable configurations, and near-best ones around the space's best."""
    rand = []
    for p in random_configs(space, n_random * 10, seed=7):
        if launchable(space, p):
            rand.append(p)
        if len(rand) >= n_random:
            break
    best = load_best(space.name)["params"]
    rng = random.Random(3)
    near: list[dict] = []
    for p in random_configs(space, n_near * 40, seed=11):
        q = dict(best)
        for name in rng.sample(sorted(best), rng.choice([1, 1, 2, 3])):
            if name in p:
                q[name] = p[name]
        try:
            q = space.effective(space.complete({k: v for k, v in q.items() if k in p or v is not None}))
        except ValueError:
            continue
        if not space.check(q) and launchable(space, q):
            near.append(q)
        if len(near) >= n_near:
            break
    return rand, near


def judge(rows: list[dict[str, Any]], name: str) -> dict[str, float]:
    full = [r["target"][0] for r in rows]
    px = [r[name][0] for r in rows]
    order = sorted(range(len(rows)), key=lambda i: -px[i])
    truth = sorted(range(len(rows)), key=lambda i: -full[i])
    top = max(full)
    return {
        "pick": full[order[0]] / top,
        "top3_confirmed": max(full[i] for i in order[:3]) / top,
        "recall_5_in_10": len(set(truth[:5]) & set(order[:10])) / 5,
        "spearman": spearman(full, px),
        "cost": sum(r[name][1] for r in rows) / sum(r["target"][1] for r in rows),
    }


def run(space_name: str, n_random: int, n_near: int, n_jobs: int) -> dict[str, Any]:
    from joblib import Parallel, delayed

    space = space_named(space_name)
    cands = candidates(space.workload)
    rand, near = draw(space, n_random, n_near)

    def measure(p: dict[str, Any]) -> dict[str, Any]:
        out = {"target": _value(space, p, space.workload)}
        for name, wl in cands.items():
            out[name] = _value(space, p, wl)
        return out

    measured: Callable = delayed(measure)
    rows = Parallel(n_jobs=n_jobs, batch_size=4)(measured(p) for p in rand + near)
    sets = {"random": rows[: len(rand)], "near-best": rows[len(rand) :], "all": rows}
    return {
        "space": space.name,
        "configs": {k: len(v) for k, v in sets.items()},
        "candidates": {
            name: {"levels": list(wl.levels), **{k: judge(v, name) for k, v in sets.items()}}
            for name, wl in cands.items()
        },
    }


def text(result: dict[str, Any]) -> str:
    header = [
        "candidate",
        "levels",
        "pick (near)",
        "top-3 (near)",
        "recall (near)",
        "Spearman (random)",
        "cost",
    ]
    rows = [
        [
            name,
            ",".join(map(str, c["levels"])),
            f"{c['near-best']['pick']:.1%}",
            f"{c['near-best']['top3_confirmed']:.1%}",
            f"{c['near-best']['recall_5_in_10']:.0%}",
            f"{c['random']['spearman']:.3f}",
            f"{c['all']['cost']:.0%}",
        ]
        for name, c in result["candidates"].items()
    ]
    return (
        f"Proxy choice on {result['space']} ({result['configs']['random']} random, "
        f"{result['configs']['near-best']} near-best configurations, noise off)\n"
        + format_table(header, rows)
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", default=REFERENCE)
    ap.add_argument("--random", type=int, default=60)
    ap.add_argument("--near", type=int, default=80)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    result = run(args.space, args.random, args.near, args.jobs)
    write_result(result_name("proxy_choice", args.space), result)
    print(text(result))
    return result


if __name__ == "__main__":
    main()
