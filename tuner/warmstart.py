"""Model-guided start: the configurations the simulator predicts to be best, measured first.

A study's first trials are its most expensive lesson: each one is a server restart, and
until a good configuration has been measured the sampler has nothing to walk from. The
simulator answers "how fast would this configuration be?" in tens of milliseconds and
without noise, so a few hundred predictions cost less than one real restart. This module
searches the space on the simulator (noise off, with a hardware profile that may be only
a guess of the real host's) and returns the best few distinct configurations, ready for
``Search(extra_start=...)``. The study then measures them on the real backend like any
other start point: a wrong prior costs a few trials, never the result.
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
TPE_SHARE = 0.3
#: Predictions this close (relative) are the same prediction: deterministic simulations
#: of configurations that differ only in knobs without a modelled effect agree exactly.
TIE = 1e-9
#: A climb does not start within this many parameter changes of an earlier climb's start
#: or summit.
RESTART_DISTANCE = 3
#: Climbs whose first pass runs side by side before the best one goes on.
CLIMBERS = 3


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
            # The screening levels (tuner.fidelity): they rank the top as the whole target
            # does (benchmarks/proxy_choice.py) at a third of the simulation time.
            for lv in simulate_sweep(model, self.space.proxy, seed=PREDICTION_SEED, noise=0.0)
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
    standing in for the host. ``trials`` predictions are spent in two phases. The space's
    start points and TPE over the whole space (:data:`TPE_SHARE` of the predictions) find
    the good regions; coordinate ascent (every value of one parameter at a time, moving on
    any improvement) then climbs: one pass from each of the :data:`CLIMBERS` best distinct
    regions found, then the leader to its summit, then restarts from regions not climbed.
    Returns at most ``k`` parameter dicts, best first (fewer when fewer launchable
    configurations were found), each complete and effective for the space, so
    ``Search(extra_start=predicted_top(space))`` measures them first. Configurations the
    model predicts exactly alike count once.
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

    # Phase 2: coordinate ascent, new predictions only. The first round makes one pass from
    # each of the CLIMBERS best phase-1 configurations that are not next to each other (a
    # basin's best start is not always the best basin), then the leader climbs to its
    # summit; leftover predictions restart from the next distant phase-1 configuration.
    values = space.value_lists()
    rng = np.random.default_rng(seed)
    seeds = [params for _, (value, params) in _ranked(found) if value > 0]
    visited: list[dict[str, Any]] = []

    def distant(params: dict[str, Any]) -> bool:
        return all(_distance(params, v) >= RESTART_DISTANCE for v in visited)

    def one_pass(current: dict[str, Any], current_value: float) -> tuple[dict[str, Any], float, bool]:
        improved = False
        for name in (str(n) for n in rng.permutation(list(values))):
            for v in values[name]:
                if len(predict.cache) >= trials:
                    return current, current_value, False
                if name not in current or _same(current[name], v):
                    continue
                candidate = space.complete({**current, name: v})
                if space.check(candidate):
                    continue  # rejected by the rules: no prediction needed
                value = evaluate(candidate)
                if value > current_value * (1 + TIE):
                    current, current_value, improved = space.effective(candidate), value, True
        return current, current_value, improved

    first_round = True
    while len(predict.cache) < trials:
        climbers: list[dict[str, Any]] = []
        for start in seeds:
            if len(climbers) == (CLIMBERS if first_round else 1):
                break
            if distant(start):
                visited.append(start)
                climbers.append(start)
        if not climbers:
            break
        results = [one_pass(c, predict(c)) for c in climbers]
        first_round = False
        current, current_value, improved = max(results, key=lambda r: r[1])
        while improved and len(predict.cache) < trials:
            current, current_value, improved = one_pass(current, current_value)
        visited += [r[0] for r in results] + [current]
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


def _distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    """Parameters whose values differ (one side missing counts as different)."""
    return sum(1 for name in set(a) | set(b) if name not in a or name not in b or not _same(a[name], b[name]))


def _same(a: Any, b: Any) -> bool:
    """Whether two parameter values are the same value (1 and True are not; 0.88 and
    0.8800000000000001 are)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) < 1e-9
    return a == b and type(a) is type(b)
