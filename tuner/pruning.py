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
"""

from __future__ import annotations

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from tuner import estimates, trial_record

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
        value = trial.intermediate_values[step]
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
            return False
        best = max(t.intermediate_values[step] for t in done)
        ratio = self.first_ratio if step == 0 else self.later_ratio
        return value < ratio * best
