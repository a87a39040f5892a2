"""Stopping clearly weak trials after a partial sweep.

Optuna's stock pruners compare a trial with the median or a percentile of the others
at the same step. Here a level's value spans an order of magnitude between layouts, and
one early level (C=1) says little about the peak of a good configuration (EP layouts
are slower than TP at C=1 and faster at peak), so a trial is pruned only when it is
*far* below the best completed trial at the same level: a configuration that is merely
second-best is never cut, one that is hopeless (EPLB on PCIe, no CUDA graphs) is cut
after the first level.

A launch in doubt as an outlier (:func:`tuner.estimates.outlier_verdicts`: a glitched
server's 3x is the usual case) sets no bar until the launches of its configuration keep
it. A re-measurement of a configuration (of a leader, or of a flagged launch) is never
pruned: it is there to measure that configuration again, and what it measures is what
tells a glitch from the configuration's value.

The bar a level will be held to is also known before the level runs (:meth:`level_bar`),
so a burst level that cannot reach it is stopped while it runs instead of drained first
(:mod:`tuner.level_watch`).
"""

from __future__ import annotations

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from tuner import estimates, trial_record
from tuner.level_watch import LevelBar

#: At the first level (single stream), prune below this share of the best completed trial.
#: EP layouts run at ~0.66 of TP8 at C=1 yet win the peak; EPLB (~0.10) and no CUDA graphs
#: (~0.25) are hopeless.
FIRST_LEVEL_RATIO = 0.40
#: At later levels (aggregate throughput), prune below this share of the best trial's value
#: at the same level.
LATER_LEVEL_RATIO = 0.75
#: Completed trials needed before anything is pruned.
MIN_COMPLETED = 3


class RelativeToBestPruner(BasePruner):
    """Prune a trial whose value at a step is far below the best completed trial's value there."""

    def __init__(
        self,
        first_ratio: float = FIRST_LEVEL_RATIO,
        later_ratio: float = LATER_LEVEL_RATIO,
        min_completed: int = MIN_COMPLETED,
    ):
        self.first_ratio = first_ratio
        self.later_ratio = later_ratio
        self.min_completed = min_completed

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or trial_record.REPEAT_OF in trial.user_attrs:
            return False
        best = self._best_at(study, step)
        return best is not None and trial.intermediate_values[step] < self._ratio(step) * best[1]

    def level_bar(self, study: optuna.Study, step: int, concurrency: int) -> LevelBar | None:
        """The bar :meth:`prune` will hold a trial's level ``step`` (at ``concurrency``) to,
        for watching that level while it runs (:mod:`tuner.level_watch`): None where nothing
        would be pruned there, or the best trial did not record that level whole. (A
        re-measurement is never pruned: its caller asks for no bar.)"""
        best = self._best_at(study, step)
        if best is None:
            return None
        reference = trial_record.level_at(best[0], concurrency)
        if reference is None or reference.get("stopped_early") or not reference.get("output_tokens"):
            return None
        return LevelBar(
            bar_tok_s=self._ratio(step) * best[1],
            tokens=int(reference["output_tokens"]),
            wall_s=float(reference["wall_s"]),
        )

    def _ratio(self, step: int) -> float:
        return self.first_ratio if step == 0 else self.later_ratio

    def _best_at(self, study: optuna.Study, step: int) -> tuple[FrozenTrial, float] | None:
        """The best completed, feasible trial at ``step`` and its value there; None while
        fewer than ``min_completed`` trials reached it (launches in doubt as outliers left out)."""
        trials = study.get_trials(deepcopy=False)
        doubtful = {n for n, v in estimates.outlier_verdicts(trials).items() if v != estimates.KEPT}
        done = [
            t
            for t in trials
            if t.state == TrialState.COMPLETE
            and step in t.intermediate_values
            and not any(v > 0 for v in t.constraints.values())
            and t.number not in doubtful
        ]
        if len(done) < self.min_completed:
            return None
        best = max(done, key=lambda t: t.intermediate_values[step])
        return best, best.intermediate_values[step]
