"""Helpers shared by the benchmark scripts: random configurations of a space, noise-free values,
the full reference sweep, the best of the space, the machine a run happened on."""

from __future__ import annotations

import argparse
import json
import os
import platform
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _blas  # before numpy: pins OpenBLAS's kernels
import numpy as np
import optuna

from tuner.failures import LaunchFailure
from tuner.metrics import summarize
from tuner.objectives import Objective, goodput_tok_s, peak_tok_s
from tuner.request_records import LevelRecords
from tuner.sim.model import PerfModel
from tuner.sim.serving import DEFAULT_NOISE, simulate_sweep
from tuner.space import DEFAULT_SPACE, Space, load_space, resolve_space
from tuner.workload import REFERENCE_LEVELS, Workload

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
optuna.logging.set_verbosity(optuna.logging.WARNING)


#: Where the benchmarks write their JSON results.
RESULTS = Path(__file__).parent / "results"
#: The benchmark suite's own spaces (benchmarks/suite.py); the project's spaces in the suite
#: stay in search_spaces/.
SUITE_SPACES = Path(__file__).parent / "spaces"
#: Where the best of every suite member is stored (one JSON file per space, by name).
SUITE_BEST = RESULTS / "suite_best"
#: The reference campaign's full sweep: C=1 at 512 tokens, then 32/64/128/192/256 at 2048.
FULL_SWEEP = Workload(levels=REFERENCE_LEVELS, max_tokens=2048, single_max_tokens=512)


def reference_space() -> Space:
    return load_space(resolve_space(DEFAULT_SPACE))


def suite_space_file(name: str) -> Path | None:
    """The file of a suite space (benchmarks/spaces/<name>.yaml), None if there is none."""
    path = SUITE_SPACES / f"{name}.yaml"
    return path if path.is_file() else None


def space_named(name: str = DEFAULT_SPACE) -> Space:
    """A space by name or path: a suite space (benchmarks/spaces/), else a space of the
    project (the reference space by default), else a file."""
    suite = suite_space_file(name)
    return load_space(suite if suite is not None else resolve_space(name))


def space_objective(space: Space) -> Objective:
    """The objective as ``tuner search`` builds it from the space (limits and floor included)."""
    return Objective(**{k: v for k, v in space.objective.model_dump().items() if v is not None})


def objective_value(objective: Objective, records: list[LevelRecords]) -> float:
    """What a configuration is worth under the whole objective, from its measured levels:
    goodput counts only the requests within the TTFT and TPOT limits, and a configuration
    that misses a constraint (the ``min_single_stream`` floor) is worth 0, as it is
    infeasible to the study. A two-objective (pareto) space has no single value."""
    if objective.multi:
        raise ValueError("a pareto objective has two values; score it by hypervolume instead")
    levels = [summarize(lv) for lv in records]
    goodputs = [
        goodput_tok_s(lv, objective.ttft_s, objective.tpot_ms) if objective.name == "goodput" else None
        for lv in records
    ]
    if any(v > 0 for v in objective.violations(levels).values()):
        return 0.0
    return float(objective.value(levels, goodputs))  # type: ignore[arg-type]


def best_path(space: str = DEFAULT_SPACE, *, suite: bool = False) -> Path:
    """Where the best of a space is stored: benchmarks/results/suite_best/<space>.json for a
    suite space (or any space when ``suite``), else space_best[-<space>].json (the
    reference space's keeps its old name)."""
    if suite or suite_space_file(space) is not None:
        return SUITE_BEST / f"{space}.json"
    return RESULTS / ("space_best.json" if space == DEFAULT_SPACE else f"space_best-{space}.json")


def result_name(name: str, space: str = DEFAULT_SPACE) -> str:
    """A benchmark's result name for a space (the reference space's is the bare name)."""
    return name if space == DEFAULT_SPACE else f"{name}-{space}"


def load_best(space: str = DEFAULT_SPACE, *, suite: bool = False) -> dict[str, Any]:
    """The best of a space (see :func:`best_path`)."""
    path = best_path(space, suite=suite)
    if not path.exists():
        flag = " --suite" if suite else ""
        raise SystemExit(
            f"{path} is missing: run `python benchmarks/space_best.py --space {space}{flag}` first"
        )
    return json.loads(path.read_text())


def machine() -> str:
    """The machine a run happened on: OS/architecture, Python, CPU cores, OpenBLAS kernels."""
    return (
        f"{platform.platform(terse=True)} {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, OpenBLAS {_blas.coretype()} kernels"
    )


def per_seed(
    doc: str | None, study: Callable[[str, int, int], Any], argv: list[str] | None = None
) -> tuple[argparse.Namespace, list[Any]]:
    """Parse a per-space benchmark's arguments (``--space``, ``--seeds``, ``--budget``,
    ``--jobs``) and run ``study(space, seed, budget)`` for each seed on ``--jobs`` worker
    processes; the arguments and the results in seed order. The space's stored best is read
    first, so a missing one is said before any study runs."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", default=DEFAULT_SPACE, help="a space of the project or of the suite")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = ap.parse_args(argv)
    load_best(args.space)
    from joblib import Parallel, delayed

    results = Parallel(n_jobs=args.jobs)(
        delayed(study)(args.space, seed, args.budget) for seed in range(args.seeds)
    )
    return args, list(results)


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write one benchmark's JSON result to benchmarks/results/<name>.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    return path


def random_configs(space: Space, n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Random configurations that pass the launch rules (sampled like the study samples)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    made = 0
    while made < n:
        trial = study.ask()
        params = space.suggest(trial)
        study.tell(trial, 0.0)
        if not space.check(params):
            made += 1
            yield params


def launchable(space: Space, params: dict[str, Any]) -> bool:
    """Whether the simulator launches the configuration (no OOM, no refused layout)."""
    spec = space.render(params)
    try:
        PerfModel.build(space.hardware, space.model, spec.argv, spec.env)
    except LaunchFailure:
        return False
    return True


def sweep(
    space: Space, params: dict[str, Any], workload: Workload, *, seed: int = 0, noise: float = 0.0
) -> tuple[float | None, float]:
    """(peak tok/s or None if the launch fails, sweep server seconds) of one configuration."""
    spec = space.render(params)
    try:
        model = PerfModel.build(space.hardware, space.model, spec.argv, spec.env)
    except LaunchFailure:
        return None, 0.0
    levels = [summarize(lv) for lv in simulate_sweep(model, workload, seed=seed, noise=noise)]
    return peak_tok_s(levels), sum(m.wall_s for m in levels)


#: Share of the best a recommendation (or a launch) needs to count as the best: the suite's
#: "within 2%".
WITHIN_2 = 0.98


def noisy_launches(model: PerfModel, workload: Workload, objective: Objective, runs: int) -> list[float]:
    """The objective of ``runs`` noisy launches of one configuration (launch seeds 0..runs-1)
    on one request set, as a study's trials serve one (0 for a launch that misses a floor)."""
    return [
        objective_value(
            objective, simulate_sweep(model, workload, seed=seed, noise=DEFAULT_NOISE, requests_seed=0)
        )
        for seed in range(runs)
    ]


#: Normal quantile of the two-sided 95% interval of a share of seeds (:func:`share_interval`).
Z_95 = 1.96


def share_interval(hits: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a share of seeds (``hits`` of ``n``).

    A study's outcome is chaotic in its inputs: the same code and seeds on two machines
    (floating-point rounding of another BLAS build) give other studies, so the share of 20
    seeds within 2% is one draw of a binomial, and a figure without its interval reads as
    more precise than it is (14/20 and 8/20 are both inside each other's interval).
    """
    if n <= 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, float(centre - half)), min(1.0, float(centre + half))


def share_text(share: float, n: int) -> str:
    """``share`` of ``n`` seeds with its 95% interval: ``40% (8/20; 95% interval 22-61%)``."""
    hits = round(share * n)
    lo, hi = share_interval(hits, n)
    return f"{share:.0%} ({hits}/{n}; 95% interval {lo:.0%}-{hi:.0%})"


def spearman(a: list[float], b: list[float]) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])
