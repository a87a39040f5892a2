"""Helpers shared by the benchmark scripts: random configurations of a space, noise-free values,
the full reference sweep, the best of the space, the machine a run happened on."""

from __future__ import annotations

import json
import os
import platform
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from tuner.failures import LaunchFailure
from tuner.metrics import summarize
from tuner.objectives import peak_tok_s
from tuner.sim.model import PerfModel
from tuner.sim.serving import simulate_sweep
from tuner.space import DEFAULT_SPACE, Space, load_space, resolve_space
from tuner.workload import REFERENCE_LEVELS, Workload

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
optuna.logging.set_verbosity(optuna.logging.WARNING)


#: Where the benchmarks write their JSON results.
RESULTS = Path(__file__).parent / "results"
#: The reference campaign's full sweep: C=1 at 512 tokens, then 32/64/128/192/256 at 2048.
FULL_SWEEP = Workload(levels=REFERENCE_LEVELS, max_tokens=2048, single_max_tokens=512)


def reference_space() -> Space:
    return load_space(resolve_space(DEFAULT_SPACE))


def space_named(name: str = DEFAULT_SPACE) -> Space:
    """A space of the project by name (the reference space by default)."""
    return load_space(resolve_space(name))


def best_path(space: str = DEFAULT_SPACE) -> Path:
    """Where the best of a space is stored (the reference space's keeps its old name)."""
    return RESULTS / ("space_best.json" if space == DEFAULT_SPACE else f"space_best-{space}.json")


def result_name(name: str, space: str = DEFAULT_SPACE) -> str:
    """A benchmark's result name for a space (the reference space's is the bare name)."""
    return name if space == DEFAULT_SPACE else f"{name}-{space}"


def load_best(space: str = DEFAULT_SPACE) -> dict[str, Any]:
    """The best of a space (benchmarks/results/space_best*.json)."""
    path = best_path(space)
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `python benchmarks/space_best.py --space {space}` first")
    return json.loads(path.read_text())


def machine() -> str:
    """The machine a run happened on: OS/architecture, Python, CPU cores."""
    return (
        f"{platform.platform(terse=True)} {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores"
    )


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


def spearman(a: list[float], b: list[float]) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])
