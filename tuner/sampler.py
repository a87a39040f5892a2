"""The study's sampler: TPE, plus local moves around the best configuration so far.

A serving study has a tiny budget (tens of trials, each a server restart) over a large,
mostly categorical space where a few knobs matter a lot and most matter a little.
TPE alone spends much of such a budget learning which knobs matter; a local search
around the incumbent finishes the job quickly once a good region is found. So after
the start-up trials, nine trials in ten are *local moves*: the best configuration so far
(see :mod:`tuner.estimates`) with one or two parameters changed (a stepped number moves a
few steps, a categorical takes another value), never a configuration already measured.
The others come from TPE, which keeps exploring. Both see the constraints of earlier
trials: infeasible and failed trials are never the incumbent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState

from tuner import estimates

#: Finished trials before local moves start (enqueued start points count: the reference
#: space has five, so the walk starts from the best of them). Over 20 seeds of the reference
#: study (benchmarks/search_efficiency.py), 5 and 0.9 reach within 2% of the space's best in
#: a median of 26 trials, against 37 with 8 and 0.8: an early TPE trial is nearly random
#: and a budget of 40 has few to spare.
LOCAL_AFTER = 5
#: Share of trials (after LOCAL_AFTER) that are local moves.
LOCAL_SHARE = 0.9
#: A stepped number moves at most this many steps in one local move.
MAX_STEPS = 3
#: A new best replaces the incumbent of the local walk only when its score is better by this
#: share. Scores pool the study's launches (tuner.effects), so they move less than one launch
#: (2% noise); over 60 seeds of the reference study (benchmarks/search_efficiency.py's
#: setting), 0, 1% and 2% reach within 2% of the space's best in 52, 55 and 52 seeds: 0
#: restarts the walk on noise, 2% keeps it on a configuration 1-2% short.
INCUMBENT_MARGIN = 0.01
#: Proposals tried to find a configuration not measured yet.
MAX_ATTEMPTS = 50


class IncumbentLocalSampler(BaseSampler):
    """TPE interleaved with one- or two-parameter moves from the best feasible trial."""

    def __init__(
        self,
        seed: int | None = None,
        *,
        local_after: int | None = None,
        local_share: float | None = None,
        identity: Callable[[dict[str, Any]], str | None] | None = None,
    ):
        """``identity`` maps a proposal to its canonical configuration (None when the launch
        rules reject it), so local moves skip impossible and already measured settings."""
        self._tpe = TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=10
        )
        self._rng = np.random.default_rng(seed)
        self._local_after = LOCAL_AFTER if local_after is None else local_after
        self._local_share = LOCAL_SHARE if local_share is None else local_share
        self._identity = identity
        self._plans: dict[int, dict[str, Any]] = {}
        self._order: list[str] = []
        self._incumbent_number = -1
        self._alternatives: dict[tuple[str, str], list[Any]] = {}
        self._tabu: set[tuple[str, str]] = set()
        self._changes: dict[int, tuple[str, Any]] = {}

    def reseed_rng(self) -> None:
        self._tpe.reseed_rng()
        self._rng = np.random.default_rng()

    # --- the plan of one trial ------------------------------------------------------------
    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._tpe.before_trial(study, trial)
        self._plans.pop(trial.number, None)
        if trial.state != TrialState.RUNNING:
            # An optuna.Trial wrapped around a finished trial (optuna-dashboard's save_note does
            # this) must not use up a move.
            return
        if "fixed_params" in trial.system_attrs or study._is_multi_objective():
            return
        done = study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        )
        if len(done) < self._local_after or self._rng.random() >= self._local_share:
            return
        best = self._sticky_incumbent(done)
        if best is None:
            return
        seen = {self._key(t.params) for t in study.get_trials(deepcopy=False) if t.number != trial.number}
        for _ in range(MAX_ATTEMPTS):
            plan, change = self._move(best)
            key = self._key(plan)
            if key is not None and key not in seen:
                self._plans[trial.number] = plan
                if change is not None:
                    self._changes[trial.number] = change
                return

    def _sticky_incumbent(self, done: Sequence[FrozenTrial]) -> FrozenTrial | None:
        """The best configuration (see :mod:`tuner.estimates`), switching only for a gain
        larger than :data:`INCUMBENT_MARGIN`.

        Chasing a noise-level "improvement" would restart the neighbourhood walk around an
        equivalent configuration and waste trials re-trying the same moves.
        """
        ev = estimates.evidence(done)
        best = ev.leader()
        if best is None:
            self._incumbent_number = -1
            return None
        sigma = ev.noise
        current = next((e for e in ev.estimates if e.trial.number == self._incumbent_number), None)
        if current is None or best.score(sigma) > current.score(sigma) * (1 + INCUMBENT_MARGIN):
            self._incumbent_number = best.trial.number
            return best.trial
        return current.trial

    def _key(self, params: dict[str, Any]) -> str | None:
        if self._identity is None:
            return repr(sorted(params.items(), key=lambda kv: kv[0]))
        return self._identity(params)

    def _move(self, best: FrozenTrial) -> tuple[dict[str, Any], tuple[str, Any] | None]:
        """The next untried single change of the incumbent, parameters in a shuffled round robin.

        Categorical parameters try each other value in turn; stepped numbers try one and two
        steps either way. A parameter's list of alternatives lasts while the incumbent keeps
        its value (a new incumbent that differs elsewhere, often by noise, does not restart
        the round). A value whose single-change trial was pruned is not tried again.
        """
        names = list(best.distributions)
        for _ in range(2 * len(names)):
            if not self._order:
                self._order = [str(x) for x in self._rng.permutation(names)]
            name = self._order.pop()
            if name not in best.distributions:
                continue
            slot = (name, repr(best.params[name]))
            queue = self._alternatives.get(slot)
            if queue is None:
                queue = self._alternatives[slot] = self._candidates(
                    best.distributions[name], best.params[name]
                )
            while queue:
                value = queue.pop(0)
                if (name, repr(value)) not in self._tabu:
                    return {**best.params, name: value}, (name, value)
        # Every single change was tried: a random two-parameter jump.
        plan = dict(best.params)
        for name in self._rng.choice(names, size=min(2, len(names)), replace=False):
            plan[name] = self._neighbour(best.distributions[name], plan[name])
        return plan, None

    def _neighbour(self, dist: BaseDistribution, value: Any) -> Any:
        """A random nearby value: another category, a few steps, or a 10%-of-range jump."""
        if isinstance(dist, CategoricalDistribution):
            others = [c for c in dist.choices if c != value]
            return others[self._rng.integers(len(others))] if others else value
        if isinstance(dist, IntDistribution | FloatDistribution) and dist.step:
            k = int(self._rng.integers(1, MAX_STEPS + 1)) * (1 if self._rng.random() < 0.5 else -1)
            moved = min(max(value + k * dist.step, dist.low), dist.high)
            return type(value)(round(moved, 10))
        if isinstance(dist, IntDistribution | FloatDistribution):
            span = dist.high - dist.low
            moved = min(max(value + self._rng.normal(0, 0.1 * span), dist.low), dist.high)
            return round(moved) if isinstance(dist, IntDistribution) else float(moved)
        return value

    def _candidates(self, dist: BaseDistribution, value: Any) -> list[Any]:
        if isinstance(dist, CategoricalDistribution):
            others = [c for c in dist.choices if c != value]
            return [others[i] for i in self._rng.permutation(len(others))]
        if isinstance(dist, IntDistribution | FloatDistribution) and dist.step:
            out = []
            for k in (2, -2, 1, -1):  # coarse first: one step is often within noise
                moved = value + k * dist.step
                if dist.low <= moved <= dist.high:
                    out.append(type(value)(round(moved, 10)))
            return out
        return [self._neighbour(dist, value)]

    # --- BaseSampler ------------------------------------------------------------------------
    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        if trial.number in self._plans:
            return {}
        return self._tpe.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if trial.number in self._plans:
            return {}
        return self._tpe.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        plan = self._plans.get(trial.number)
        if plan is not None:
            if param_name in plan and param_distribution._contains(
                param_distribution.to_internal_repr(plan[param_name])
            ):
                return plan[param_name]
            if isinstance(param_distribution, CategoricalDistribution):
                # A parameter the move switched on (a `when` now true) starts at its first value:
                # the engine default, so one move changes one thing.
                return param_distribution.choices[0]
        return self._tpe.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self._plans.pop(trial.number, None)
        change = self._changes.pop(trial.number, None)
        if change is not None and state == TrialState.PRUNED:
            # Pruned = hopeless for performance (EPLB, DeepEP on PCIe, no CUDA graphs): not worth
            # another try from another incumbent. Failures and rule violations depend on the rest
            # of the configuration (memory, layout), so those values stay candidates.
            self._tabu.add((change[0], repr(change[1])))
        self._tpe.after_trial(study, trial, state, values)
