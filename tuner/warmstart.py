"""Model-guided start: the configurations the simulator predicts to be best, measured first.

A study's first trials are its most expensive lesson: each one is a server restart, and
until a good configuration has been measured the sampler has nothing to walk from. The
simulator answers "how fast would this configuration be?" in tens of milliseconds and
without noise, so a few hundred predictions cost less than one real restart. This module
searches the space on the simulator (noise off, with a hardware profile that may be only
a guess of the real host's) and returns the best few distinct configurations, ready for
``Search(extra_start=...)``. The study then measures them on the
real backend like any other start point: a wrong prior costs a few trials, never the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import optuna

from tuner import profiles
from tuner.engines import sglang
from tuner.failures import LaunchFailure
from tuner.metrics import summarize
from tuner.objectives import Objective
from tuner.profiles import HardwareProfile, ModelProfile
from tuner.sim.model import PerfModel
from tuner.sim.serving import simulate_sweep
from tuner.space import Space

#: Seed of the simulated reply lengths of a noise-free prediction (the same draw for every
#: configuration, so predictions differ by the configuration alone).
PREDICTION_SEED = 0
#: Share of the predictions spent on the global phase (start points and TPE); the rest
#: climbs from its best configurations.
TPE_SHARE = 0.5
#: Predictions this close (relative) are the same prediction: deterministic simulations
#: of configurations that differ only in knobs without a modelled effect agree exactly.
TIE = 1e-9


class Predictor:
    """Noise-free objective value of a space's configurations under one hardware profile.

    A configuration the space's rules or constraints reject, or one the model says cannot
    launch (OOM, invalid layout for the profile's GPU count), predicts 0. Values are cached
    by the configuration's canonical key.
    """

    def __init__(self, space: Space, hardware_profile: HardwareProfile | str | None = None):
        self.space = space
        self.hardware: HardwareProfile = (
            space.hardware_profile
            if hardware_profile is None
            else profiles.hardware(hardware_profile)
            if isinstance(hardware_profile, str)
            else hardware_profile
        )
        self.model: ModelProfile = space.model_profile
        data = {k: v for k, v in space.objective.model_dump().items() if v is not None}
        self.objective = Objective(**data)
        self.cache: dict[str, float] = {}

    def __call__(self, params: Mapping[str, Any]) -> float:
        full = self.space.complete(params)
        key = self.space.key(full)
        if key not in self.cache:
            self.cache[key] = self._predict(full)
        return self.cache[key]

    def _predict(self, params: dict[str, Any]) -> float:
        if self.space.check(params):
            return 0.0
        spec = self.space.render(params)
        try:
            model = PerfModel(self.hardware, self.model, sglang.parse_args(spec.argv), spec.env)
        except LaunchFailure:
            return 0.0
        levels = [
            summarize(lv)
            for lv in simulate_sweep(model, self.space.workload, seed=PREDICTION_SEED, noise=0.0)
        ]
        if any(v > 0 for v in self.objective.violations(levels).values()):
            return 0.0
        value = self.objective.value(levels)
        # Pareto studies: rank by the peak (the last objective).
        return float(value[-1] if isinstance(value, tuple) else value)


def predicted_top(
    space: Space,
    *,
    hardware_profile: HardwareProfile | str | None = None,
    k: int = 5,
    trials: int = 300,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The ``k`` distinct configurations of ``space`` with the best noise-free prediction.

    The prediction is the simulator's objective value under the space's workload, with
    ``hardware_profile`` (a profile, a profile id or a YAML path; default: the space's own)
    standing in for the host. ``trials`` predictions are spent in two phases: the space's
    start points and TPE over the whole space (:data:`TPE_SHARE` of them) find the good
    regions, then coordinate ascent (every value of one parameter at a time, moving on any
    improvement) climbs from the best configurations found, restarting from the next best
    when one converges. Returns at most ``k`` parameter dicts (fewer when fewer launchable
    configurations were found), best first, each complete and effective for the space, so
    ``Search(extra_start=predicted_top(space))`` measures them first.
    """
    if k < 1:
        raise ValueError("k must be at least 1")
    if trials < 1:
        raise ValueError("trials must be at least 1")
    predict = Predictor(space, hardware_profile)
    found: dict[str, tuple[float, dict[str, Any]]] = {}

    def evaluate(params: Mapping[str, Any]) -> float:
        full = space.effective(space.complete(params))
        value = predict(full)
        found.setdefault(space.key(full), (value, full))
        return value

    # Phase 1: start points, then TPE (each ask counts, repeated proposals included, so the
    # phase always ends).
    tpe_trials = max(1, round(trials * TPE_SHARE))
    for point in space.start_points()[:tpe_trials]:
        evaluate(point)
    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True),
    )
    for _ in range(tpe_trials - len(found)):
        trial = study.ask()
        study.tell(trial, evaluate(space.suggest(trial)))

    # Phase 2: coordinate ascent from the best configurations found, new predictions only.
    values = space.value_lists()
    rng = np.random.default_rng(seed)
    climbed: set[str] = set()
    while len(predict.cache) < trials:
        starts = [vp for key, vp in _ranked(found) if key not in climbed and vp[0] > 0]
        if not starts:
            break
        current_value, current = starts[0]
        climbed.add(space.key(current))
        improved = True
        while improved and len(predict.cache) < trials:
            improved = False
            for name in rng.permutation(list(values)):
                for v in values[str(name)]:
                    if len(predict.cache) >= trials:
                        break
                    if name not in current or _same(current[name], v):
                        continue
                    candidate = space.complete({**current, str(name): v})
                    if space.check(candidate):
                        continue  # rejected by the rules: no prediction needed
                    value = evaluate(candidate)
                    if value > current_value * (1 + 1e-9):
                        current_value, current, improved = value, space.effective(candidate), True
                        climbed.add(space.key(current))
    picks: list[tuple[float, dict[str, Any]]] = []
    for _, (value, params) in _ranked(found):
        if len(picks) == k or value <= 0:
            break
        # Configurations the model cannot tell apart (they differ only in knobs it predicts to
        # have no effect, e.g. a request cap above what the KV pool admits) are one pick.
        if all(abs(value - v) > TIE * v for v, _ in picks):
            picks.append((value, params))
    return [params for _, params in picks]


def _ranked(found: dict[str, tuple[float, dict[str, Any]]]) -> list[tuple[str, tuple[float, dict[str, Any]]]]:
    """Configurations by predicted value, best first (ties: first found first)."""
    return sorted(found.items(), key=lambda kv: kv[1][0], reverse=True)


def _same(a: Any, b: Any) -> bool:
    """Whether two parameter values are the same value (1 and True are not; 0.88 and
    0.8800000000000001 are)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) < 1e-9
    return a == b and type(a) is type(b)
