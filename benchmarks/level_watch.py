"""Stopping hopeless burst levels early: how much server time it saves, and whether it ever
stops a level that would have reached its bar.

    python benchmarks/level_watch.py [--configs 40] [--spaces a,b,...] [--jobs 2]

For every space of the suite whose target is a burst sweep, the space's stored best
(benchmarks/results/suite_best/) is measured noise-free in screening order (the proxy's
levels, then the rest of the target's): the reference levels. Then ``--configs`` random
launchable configurations of the space are measured the same way (noise on, one launch
seed each, the study's request set), and every level is replayed as a watched server runs
it (tuner.level_watch.replay) against the bar a study would hold it to:

* the proxy's levels against the pruner's bar (tuner.pruning: 40% of the best at C=1, 75%
  above): a level stopped there is pruned;
* on peak-objective spaces, the target's other levels (measured by finalists) against the
  peak the launch measured already, less tuner.study.PEAK_MARGIN: a level that cannot raise
  it is cut short.

Per space and kind of bar:

* stopped: levels stopped before they drained, of all levels measured;
* false stops: stopped levels whose whole run reached the bar; the goal is none;
* optimism: the projection a level was stopped on over its whole-run value (>= 1: the
  projection does not understate a stopped level), median and lowest;
* level time saved: the share of these levels' server time (whole runs) the stops save.

Results: benchmarks/results/level_watch.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import launchable, load_best, random_configs, space_named, write_result
from _tables import format_table

from tuner import level_watch
from tuner.fidelity import screening_order
from tuner.metrics import summarize
from tuner.pruning import FIRST_LEVEL_RATIO, LATER_LEVEL_RATIO
from tuner.sim.model import PerfModel
from tuner.sim.serving import DEFAULT_NOISE, ServingSimulator
from tuner.space import Space
from tuner.study import PEAK_MARGIN

SPACES = (
    "kimi-k2.6-8x-rtx-pro-6000",
    "deepseek-v3-8x-h200-chat",
    "kimi-k2.6-8x-b200-longprompt",
    "deepseek-v3-8x-h200-goodput",
    "kimi-k2.6-8x-rtx-pro-6000-floor",
    "kimi-k2.6-8x-h200-single",
    "deepseek-v3-8x-b200-longout",
    "deepseek-v3-8x-rtx-pro-6000-floor",
)
#: The request set every launch serves (a study's seed).
REQUESTS_SEED = 0


def levels_of(space: Space, params: dict[str, Any], *, launch: int, noise: float) -> list[Any]:
    """The levels of one launch of a launchable configuration, in screening order (the
    proxy's, then the rest of the target's), as records per level."""
    spec = space.render(params)
    model = PerfModel.build(space.hardware, space.model, spec.argv, spec.env)
    sim = ServingSimulator(model, seed=launch, noise=noise, requests_seed=REQUESTS_SEED)
    sim.warm_up(space.workload)
    order = screening_order(space.proxy, space.workload) or space.proxy.levels
    return [sim.run_level(space.workload, c) for c in order]


def one_space(name: str, n_configs: int) -> dict[str, Any]:
    space = space_named(name)
    best = space.complete(load_best(name, suite=True)["params"])
    reference = [summarize(level) for level in levels_of(space, best, launch=0, noise=0.0)]
    screened = len(space.proxy.levels)
    hopeless: list[Any] = []  # per proxy level: (whole run, watched run, bar)
    peak: list[Any] = []  # per target level after the proxy: the same, against the launch's peak
    configs = (p for p in random_configs(space, n_configs * 4, seed=5) if launchable(space, p))
    for n, params in enumerate(configs):
        if n >= n_configs:
            break
        top = 0.0
        levels = levels_of(space, params, launch=n + 1, noise=DEFAULT_NOISE)
        for i, (level, ref) in enumerate(zip(levels, reference, strict=True)):
            whole = summarize(level)
            if i < screened:
                ratio = FIRST_LEVEL_RATIO if i == 0 else LATER_LEVEL_RATIO
                bar = level_watch.LevelBar(ratio * ref.output_tok_s, ref.output_tokens, ref.wall_s)
                hopeless.append((whole, summarize(level_watch.replay(level, bar)), bar))
            elif top > 0 and level.concurrency > 1 and space.objective.name == "peak":
                bar = level_watch.LevelBar((1 - PEAK_MARGIN) * top, ref.output_tokens, ref.wall_s)
                peak.append((whole, summarize(level_watch.replay(level, bar)), bar))
            if level.concurrency > 1:
                top = max(top, whole.output_tok_s)
    return {"space": name, "hopeless": tally(hopeless), "peak": tally(peak)}


def tally(runs: list[Any]) -> dict[str, Any]:
    """Stops, false stops (a stopped level whose whole run reached its bar), the projection
    over the whole run of stopped levels, and the share of level time saved."""
    stops = [(whole, watched, bar) for whole, watched, bar in runs if watched.stopped_early]
    optimism = [watched.output_tok_s / whole.output_tok_s for whole, watched, _ in stops]
    whole_s = sum(whole.wall_s for whole, _, _ in runs)
    return {
        "levels": len(runs),
        "stopped": len(stops),
        "false_stops": sum(whole.output_tok_s >= bar.bar_tok_s for whole, _, bar in stops),
        "optimism_median": statistics.median(optimism) if optimism else None,
        "optimism_lowest": min(optimism) if optimism else None,
        "time_saved_share": sum(w.wall_s - x.wall_s for w, x, _ in stops) / whole_s if whole_s else 0.0,
    }


def cells(t: dict[str, Any]) -> list[Any]:
    optimism = (
        "-" if t["optimism_median"] is None else f"{t['optimism_median']:.2f}, {t['optimism_lowest']:.2f}"
    )
    return [t["levels"], t["stopped"], t["false_stops"], optimism, f"{t['time_saved_share']:.0%}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int, default=40, help="random configurations per space (default 40)")
    ap.add_argument("--spaces", default=",".join(SPACES))
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    from joblib import Parallel, delayed

    names = [s for s in args.spaces.split(",") if s]
    rows = Parallel(n_jobs=args.jobs)(delayed(one_space)(name, args.configs) for name in names)
    for kind, title in (("hopeless", "below the pruner's bar"), ("peak", "cannot raise the launch's peak")):
        print(f"\nlevels stopped as {title}:")
        print(
            format_table(
                [
                    "space",
                    "levels",
                    "stopped",
                    "false stops",
                    "optimism (median, lowest)",
                    "level time saved",
                ],
                [[r["space"], *cells(r[kind])] for r in rows],
            )
        )
        total = sum(r[kind]["false_stops"] for r in rows)
        print(f"false stops: {total} of {sum(r[kind]['stopped'] for r in rows)} stopped levels (goal: none)")
    write_result("level_watch", {"configs_per_space": args.configs, "spaces": rows})


if __name__ == "__main__":
    main()
