"""What ``--budget N`` counts, and what happens to trials that gave no verdict.

``--budget N`` is N trials that produced a verdict about their configuration: it was
measured (complete, pruned, a constraint missed), its launch failed in a way the
configuration is to blame for (out of memory, invalid arguments, a crash, a hang), or
its result was reused. Trials that say nothing about their configuration do not use
the budget up:

* ``interrupted`` (Ctrl-C, SIGTERM), ``orphaned`` (the process running it died),
  ``stale`` (its worker on another host stopped beating) and ``setup`` (the host is not
  set up to launch anything): their configuration is queued again, and the queued
  copies run before any new proposal on the next run;
* ``infeasible``: a proposal the engine's rules or the space's constraints reject costs
  no server time; it is recorded so the sampler learns, but does not count. A study
  that proposes nothing else stops after :data:`MAX_CONSECUTIVE_REJECTIONS` of them.

A rerun after any interruption therefore ends with exactly N verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner import ownership, trial_record

#: Failure classes that say nothing about the configuration (see module docstring).
NO_VERDICT_CLASSES = frozenset({"interrupted", "orphaned", "setup", "port-busy", "unreachable", "error"})
#: Proposals rejected in a row before the study gives up: the space's constraints (or
#: the engine's rules) leave the sampler nearly nothing to propose.
MAX_CONSECUTIVE_REJECTIONS = 50


class StudyStopped(Exception):
    """The study cannot go on (a setup error, a space that rejects every proposal)."""

    def __init__(self, message: str, log_path: str | None = None):
        super().__init__(message)
        self.log_path = log_path


def has_verdict(t: FrozenTrial) -> bool:
    """The trial says something about its configuration (it uses up the budget)."""
    if not t.state.is_finished():
        return False
    if trial_record.OUTCOME not in t.user_attrs:
        return t.state != TrialState.FAIL  # a FAIL without outcome: failed by Optuna as stale
    if trial_record.outcome(t) == "infeasible":
        return False
    return t.user_attrs.get(trial_record.FAILURE_CLASS) not in NO_VERDICT_CLASSES


def verdicts(trials: Sequence[FrozenTrial]) -> int:
    return sum(1 for t in trials if has_verdict(t))


def counted(trials: Sequence[FrozenTrial]) -> int:
    """Verdicts plus the trials running now (each will give one, or be queued again)."""
    return verdicts(trials) + sum(1 for t in trials if t.state == TrialState.RUNNING)


def consecutive_rejections(trials: Sequence[FrozenTrial]) -> int:
    """How many of the latest finished trials in a row were rejected proposals."""
    n = 0
    finished = [t for t in trials if t.state.is_finished()]
    for t in sorted(finished, key=lambda t: t.number, reverse=True):
        if trial_record.outcome(t) != "infeasible":
            break
        n += 1
    return n


def requeue(study: optuna.Study, t: FrozenTrial) -> None:
    """Queue ``t``'s configuration again, to run before new proposals: a retry in Optuna's
    own terms (system attributes ``failed_trial`` and ``retry_history``, as its heartbeat
    retries are), so every reader shows it as a retry of ``t``."""
    if not t.params:
        return
    keep = {k: v for k, v in t.user_attrs.items() if k in trial_record.QUEUE_ATTRS}
    history = [*t.system_attrs.get("retry_history", []), t.number]
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=dict(t.params),
            distributions=dict(t.distributions),
            user_attrs=keep,
            system_attrs={"failed_trial": t.number, "retry_history": history},
        )
    )


def reap_orphans(study: optuna.Study) -> list[int]:
    """Fail, as ``orphaned``, the running trials whose owner on this host is dead (a
    killed run), and queue their configurations again. Trials of owners on other hosts
    are left to the heartbeat grace (:func:`optuna.storages.fail_stale_trials`).
    Returns the numbers of the trials reaped."""
    storage = study._storage
    reaped = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = ownership.Owner.of(t.user_attrs.get(trial_record.OWNER))
        if owner is None or owner.alive() is not False:
            continue
        try:
            trial_record.TrialWriter.stored(storage, t._trial_id).orphaned(owner.describe())
            if not storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another worker reaped it first
        requeue(study, t)
        reaped.append(t.number)
    return reaped


def ask(study: optuna.Study) -> optuna.Trial:
    """The next trial: a queued-again configuration first (interrupted, orphaned, stale
    or setup-failed trials' copies, and re-measurements of outliers), then the queue in
    order, then a new proposal."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if "failed_trial" not in t.system_attrs and trial_record.OUTLIER_CHECK not in t.user_attrs:
            continue
        try:
            if study._storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING):
                study._thread_local.cached_all_trials = None  # as Study.ask does: sync once per trial
                return optuna.Trial(study, t._trial_id)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
    return study.ask()
