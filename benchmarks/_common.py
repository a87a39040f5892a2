"""Helpers shared by the benchmark scripts: random configurations of a space, noise-free values."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import optuna

from tuner.failures import LaunchFailure
from tuner.metrics import summarize
from tuner.objectives import peak_tok_s
from tuner.sim.model import PerfModel
from tuner.sim.serving import simulate_sweep
from tuner.space import DEFAULT_SPACE, Space, load_space, resolve_space
from tuner.workload import Workload

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
optuna.logging.set_verbosity(optuna.logging.WARNING)


def reference_space() -> Space:
    return load_space(resolve_space(DEFAULT_SPACE))


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


def sweep(space: Space, params: dict[str, Any], workload: Workload, *, seed: int = 0,
          noise: float = 0.0) -> tuple[float | None, float]:
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
