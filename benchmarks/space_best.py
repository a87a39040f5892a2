"""The best configuration of a space under its target workload, noise off.

    python benchmarks/space_best.py [--space NAME-OR-PATH] [--trials 600] [--suite]
        [--start '{"layout": "tp4pp2", ...}' ...]

The space has millions of configurations, too many to enumerate at ~40 ms each, so
"the best" is established by a far larger search than a study: a noise-free TPE run of
``--trials`` trials, then coordinate ascent (every value of every parameter, one at a
time, until no single change improves) from its five best configurations, from the
space's start points, from the best stored by an earlier run (a re-run never ends below
it) and from each ``--start`` configuration (one a study found above the stored best: the
suite says when one does). A configuration is scored noise-free under the space's whole
objective (:func:`_common.objective_value`: goodput limits, the single-stream floor).

The result is written to ``benchmarks/results/space_best.json`` (the reference space) or
``space_best-<space>.json`` for the other benchmarks; a suite space's (benchmarks/spaces/,
or any space with ``--suite``) to ``benchmarks/results/suite_best/<space>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import optuna
from _common import best_path, objective_value, space_named, space_objective

from tuner.failures import LaunchFailure
from tuner.sim.model import PerfModel
from tuner.sim.serving import simulate_sweep
from tuner.space import Space, SpaceError

#: Seed of the noise-free ground truth (reply lengths are drawn from it).
TRUTH_SEED = 0


def true_value(
    space: Space,
    params: dict[str, Any],
    cache: dict[str, float] | None = None,
    requests_seeds: Sequence[int] | None = None,
) -> float:
    """Noise-free value of a configuration under the space's whole objective (0 when it
    cannot launch or misses a constraint), on the truth's draw of the workload's requests
    (:data:`TRUTH_SEED`) or, given ``requests_seeds``, the mean over those request sets (0
    when it misses a constraint on any of them). A ``cache`` holds one of the two scorings."""
    key = space.key(params)
    if cache is not None and key in cache:
        return cache[key]
    value = 0.0
    if not space.check(params):
        spec = space.render(params)
        objective = space_objective(space)
        try:
            model = PerfModel.build(space.hardware, space.model, spec.argv, spec.env)
            if requests_seeds is None:
                sweeps = [simulate_sweep(model, space.workload, seed=TRUTH_SEED, noise=0)]
            else:
                sweeps = [
                    simulate_sweep(model, space.workload, noise=0, requests_seed=s) for s in requests_seeds
                ]
            values = [objective_value(objective, records) for records in sweeps]
            value = 0.0 if min(values) <= 0 else sum(values) / len(values)
        except LaunchFailure:
            value = 0.0
    if cache is not None:
        cache[key] = value
    return value


def coordinate_ascent(
    space: Space,
    start: dict[str, Any],
    cache: dict[str, float],
    value: Callable[[Space, dict[str, Any], dict[str, float]], float] = true_value,
) -> tuple[float, dict]:
    """The configuration reached from ``start`` by changing one parameter at a time while a
    change raises ``value`` (noise-free, cached in ``cache``), and its value."""
    best, best_v = dict(start), value(space, start, cache)
    improved = True
    while improved:
        improved = False
        for name, values in space.value_lists().items():
            for v in values:
                cand = space.complete({**best, name: v})
                val = value(space, cand, cache)
                if val > best_v * (1 + 1e-9):
                    best, best_v, improved = cand, val, True
    return best_v, best


def _configuration(space: Space, text: str) -> dict[str, Any]:
    """A ``--start`` configuration: a JSON object of the space's parameters (the ones left
    out take their first value), each value inside its domain, which the space's rules
    must accept."""
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--start: not JSON: {exc}") from exc
    if not isinstance(params, dict):
        raise SystemExit("--start: a JSON object of parameter values is expected")
    unknown = sorted(set(params) - set(space.distributions()))
    if unknown:
        raise SystemExit(f"--start: {space.name} has no parameter {', '.join(unknown)}")
    config = space.complete(params)
    try:
        space.effective(config)  # the loader's own check of values against their domains
    except SpaceError as exc:
        raise SystemExit(f"--start: {'; '.join(f'{f}: {m}' if f else m for f, m in exc.problems)}") from None
    refused = space.check(config)
    if refused:
        raise SystemExit(f"--start: the rules reject it: {'; '.join(refused)}")
    return config


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=600)
    ap.add_argument("--space", default=None, help="a space's name or file (default: the reference space)")
    ap.add_argument(
        "--suite", action="store_true", help="store under results/suite_best/ (suite spaces always are)"
    )
    ap.add_argument(
        "--start",
        action="append",
        default=[],
        metavar="JSON",
        help="a configuration (JSON object of parameter values) to ascend from as well; repeatable",
    )
    args = ap.parse_args(argv)
    space = space_named(args.space) if args.space else space_named()
    result = best_path(space.name, suite=args.suite)
    extra = [_configuration(space, text) for text in args.start]
    if result.exists():
        extra.append(space.complete(json.loads(result.read_text())["params"]))
    cache: dict[str, float] = {}
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=0, multivariate=True, group=True)
    )
    for _ in range(args.trials):
        trial = study.ask()
        params = space.suggest(trial)
        study.tell(trial, true_value(space, params, cache))
    top = sorted(study.get_trials(), key=lambda t: t.value or 0.0, reverse=True)[:5]
    starts = [space.complete(t.params) for t in top] + space.start_points() + extra
    results = [coordinate_ascent(space, s, cache) for s in starts]
    best_v, best = max(results, key=lambda r: r[0])
    spec = space.render(best)
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(
        json.dumps(
            {
                "space": space.name,
                "objective": space_objective(space).model_dump(),
                "value": best_v,
                "params": best,
                "argv": spec.argv,
                "env": spec.env,
                "evaluated": len(cache),
                "tpe_trials": args.trials,
            },
            indent=2,
        )
    )
    print(
        f"best of {space.name} (noise off, seed {TRUTH_SEED}): {best_v:.1f} "
        f"{space.objective.name} tok/s after {len(cache)} "
        f"distinct configurations"
    )
    print("  " + " ".join(spec.argv))
    print("  " + " ".join(f"{k}={v}" for k, v in spec.env.items()))
    print("  ascent results from each start: " + ", ".join(f"{v:.0f}" for v, _ in results))


if __name__ == "__main__":
    main()
