"""The Optuna study: one trial = one launch of the server with sampled settings.

Data flow of a trial: the space's sampler proposes parameters -> engine rules and the
space's constraints reject impossible combinations before any launch -> a configuration
already measured in this study is reused -> the launch is rendered (argv + env) -> the
measurer (:mod:`tuner.measurers`) starts the server and sweeps the proxy's levels (the
screening levels of the target workload, :mod:`tuner.fidelity`), reporting each level to
Optuna, which may prune -> a leader goes on to the target's other levels in the same launch
-> the objective value, constraints and records are stored on the trial -> the server is
stopped.

Everything a person or ``tuner best`` needs later lives in the trial's user attributes,
written through :class:`tuner.trial_record.TrialWriter`, so any Optuna storage is the
whole state of a study (:mod:`tuner.storage`).
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from loguru import logger
from optuna.trial import FrozenTrial, TrialState

from tuner import budget, effects, estimates, fidelity, ownership, resolution, start_points, trial_record
from tuner.budget import StudyStopped
from tuner.coordination import BudgetGate, Heartbeat
from tuner.failures import SETUP_CLASSES, LaunchFailure
from tuner.level_watch import LevelBar
from tuner.measurers import Interrupted, Measurer
from tuner.metrics import LevelMetrics
from tuner.objectives import Objective
from tuner.preflight import Verdict
from tuner.pruning import RelativeToBestPruner
from tuner.sampler import IncumbentLocalSampler, MemoryFraction, local_model
from tuner.space import Space
from tuner.storage import GRACE_S, open_storage
from tuner.trial_record import (
    TrialWriter,
    queued_model_pick,
    queued_outlier_check,
    queued_repeat,
    write_study_info,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
# Heartbeats and metric names are marked experimental in Optuna 5; both are relied on here.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
# The worker loop uses ask/tell with its own heartbeat thread (tuner.coordination.Heartbeat).
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")

#: Trials at the end of a budget that launch the additive model's pick and re-measure the
#: leading configurations (at most an eighth of the budget).
CONFIRM_LAST = 5
#: Configurations this close (relative) are as good as each other: settling their order is
#: not worth a launch.
INDIFFERENCE = 0.01
#: In the last trials of the budget, a screened trial whose proxy value is within this many
#: noise standard deviations of the leader's estimate goes on to the target's other levels
#: in the same launch (a finalist; its missing levels cost no second start-up).
PROMOTE_WITHIN_SD = 2.0
#: Standard deviations by which the expected gain of a change (the additive model fitted
#: around the leader, :func:`tuner.sampler.local_model`) must exceed 0 for the model's pick
#: to make it. On the trace space a pick of every positive mean of the study-wide model
#: changed 4-6 parameters at once (CUDA graphs off, EP off) and lost 10-25%.
MODEL_PICK_Z = 1.0
#: While no configuration meets the objective's constraints on average, a configuration whose
#: launches came within this many standard errors of the floor (the mean of its single-stream
#: rates, see tuner.estimates.floor_odds) is measured again in the final trials: at 2% noise,
#: 59 tok/s under a 60 tok/s floor is a coin flip that one more launch may settle. Two deviations, as for
#: :data:`PROMOTE_WITHIN_SD`: what one launch cannot tell apart. Not fitted on any space (no
#: TUNE space of benchmarks/suite.py has a floor).
NEAR_FLOOR_SD = 2.0
#: Launches of one near-floor configuration at most: three tell a mean from a lucky run.
NEAR_FLOOR_RUNS = 3
#: A level of a peak-objective launch is cut short once it cannot come within this share of
#: the peak the launch measured already (:meth:`Search._level_bar`): within it the level
#: could still hold the peak by noise (about 2% a launch, tuner.estimates), so it runs out.
PEAK_MARGIN = 0.02
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
#: Launches in a row failing with one setup error (the same cause whatever the parameters)
#: that stop the study; :data:`SETUP_STOP_ANY` in a row stop it whatever their causes.
SETUP_STOP_SAME = 2
SETUP_STOP_ANY = 3
#: How often a worker whose budget is all running elsewhere looks again.
WAIT_FOR_OTHERS_S = 0.5


def _memory_fraction(space: Space) -> MemoryFraction | None:
    """The space's memory-fraction parameter and its host's GPU memory, for the sampler."""
    name = space.memory_fraction_parameter()
    return None if name is None else MemoryFraction(name, space.hardware_profile.gpu.memory_gib)


def default_study_name(space: Space, objective: Objective) -> str:
    return space.name if objective.name == "peak" else f"{space.name}-{objective.name}"


class Search:
    """Runs a study to its budget of finished trials."""

    def __init__(
        self,
        space: Space,
        measurer: Measurer,
        *,
        study_name: str,
        storage: str,
        objective: Objective,
        seed: int | None = None,
        budget: int = 40,
        reuse: bool = True,
        prune: bool = True,
        confirm: bool = True,
        warm_start: bool = True,
        extra_start: list[dict[str, Any]] | None = None,
        on_trial: Callable[[optuna.Study, FrozenTrial], None] | None = None,
        on_level: Callable[[int, int, Any], None] | None = None,
        on_start: Callable[[int], None] | None = None,
    ):
        self.space = space
        self.measurer = measurer
        self.objective = objective
        self.seed = seed
        self.budget = budget
        self.reuse = reuse
        self.prune = prune and not objective.multi
        self.confirm = confirm and not objective.multi
        self.on_trial = on_trial
        self.on_level = on_level
        self.on_start = on_start
        self.storage_url = storage
        self.warm_start = warm_start
        self.extra_start = list(extra_start or [])
        #: Start configurations the budget left out (label, parameters): see run().
        self.start_not_run: list[tuple[str, dict[str, Any]]] = []
        self.study_name = study_name
        sampler = IncumbentLocalSampler(
            seed=seed,
            identity=self._identity,
            distributions=space.distributions(),
            feasibility=self._feasibility,
            complete=space.complete,
            capacity=space.capacity_parameters(),
            memory_fraction=_memory_fraction(space),
        )
        self.storage = open_storage(storage)
        self.gate = BudgetGate(self.storage, storage, study_name)
        with self.gate.hold():  # workers starting at once create the study once
            self.study = optuna.create_study(
                study_name=study_name,
                storage=self.storage,
                sampler=sampler,
                pruner=RelativeToBestPruner() if self.prune else optuna.pruners.NopPruner(),
                directions=objective.directions,
                load_if_exists=True,
            )
            self.requests_seed = trial_record.requests_seed(self.study, default=seed or 0)
        self._stop = threading.Event()
        self._told_waiting = threading.Event()
        #: Setup failures in a row: (cause, log path) of each.
        self._setup_failures: list[tuple[str, str | None]] = []
        self.study.set_metric_names(
            ["single_stream_tok_s", "peak_tok_s"] if objective.multi else [f"{objective.name}_tok_s"]
        )
        unit = space.launch.unit.model_dump() if space.launch.unit else {}
        write_study_info(
            self.study,
            space=space.name,
            objective=objective.model_dump(),
            engine=space.spec.engine,
            workload=space.workload.model_dump(mode="json"),
            unit={**unit, "python": space.launch.python},
            proxy=space.proxy.model_dump(mode="json"),
        )
        # Screening pays off only with trials left to confirm its leaders on the target: a
        # budget of one or two measures every trial on the whole target.
        self.screens = self.confirm and space.proxy != space.workload and budget >= 3
        self.order = fidelity.screening_order(space.proxy, space.workload)

    def _feasibility(self, t: FrozenTrial) -> float | None:
        """How close a launch came to the objective's constraints (see
        :meth:`Objective.feasibility`); None for a trial that measured nothing."""
        return self.objective.feasibility(t.constraints) if estimates.launched(t) else None

    def _identity(self, params: dict[str, Any]) -> str | None:
        """Canonical configuration of a sampler proposal; None if the launch rules reject it."""
        try:
            full = self.space.complete(params)
            return None if self.space.check(full) else resolution.server_key(self.space, full)
        except ValueError:
            return None

    # --- budget (see tuner.budget) -----------------------------------------------------
    def finished(self) -> int:
        """Trials that gave a verdict on their configuration (what ``--budget`` counts)."""
        return budget.verdicts(self.study.get_trials(deepcopy=False))

    def counted(self) -> int:
        """Trials that use up the budget: verdicts and trials running now."""
        return budget.counted(self.study.get_trials(deepcopy=False))

    def run(self, workers: int = 1) -> optuna.Study:
        """Run trials until the study has ``budget`` finished trials.

        ``workers`` > 1 runs that many trials at once in threads of this process: a trial
        mostly waits (a server loading, a sweep streaming), so threads suffice, share the
        storage's connection pool, and let Ctrl-C stop every server from one place. Ctrl-C
        (or SIGTERM) stops the running servers, records their trials as ``interrupted``
        (their configurations are queued again) and re-raises.
        """
        if self.warm_start:
            self._enqueue_start_points()
        if workers <= 1:
            self._worker()
            return self.study
        errors: list[BaseException] = []

        def work() -> None:
            try:
                self._worker()
            except BaseException as exc:
                errors.append(exc)
                self._stop.set()

        threads = [threading.Thread(target=work, name=f"worker-{i}", daemon=True) for i in range(workers)]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.2)
        except KeyboardInterrupt:
            self._stop.set()
            self.measurer.interrupt()
            for t in threads:
                t.join()
            raise
        if errors:
            raise errors[0]
        return self.study

    def start_points(self) -> list[dict[str, Any]]:
        """The space's ``start:`` list; where it has none, the engine's defaults per layout
        (:mod:`tuner.start_points`) for a study with nothing measured or queued yet."""
        listed = self.space.start_points()
        if listed or self.extra_start or self.study.get_trials(deepcopy=False):
            return listed
        return start_points.defaults(self.space, self.budget)

    def _enqueue_start_points(self) -> None:
        """Queue the space's known-good configurations first (then ``extra_start``), once per
        study and only as many as the budget can run: what the budget leaves after the trials
        counted or queued already and the final window (:meth:`final_window`, kept for the
        confirmations). A queued point the budget cannot reach would stay WAITING in the
        study after the run; the points left out are in :attr:`start_not_run`, and a rerun
        with a larger budget queues them."""
        listed = bool(self.space.start_points())
        kind = "start point" if listed else "engine default"
        points = [(f"{kind} {i}", p) for i, p in enumerate(self.start_points(), 1)]
        points += [(f"simulator's pick {i}", p) for i, p in enumerate(self.extra_start, 1)]
        self.start_not_run = []
        with self.gate.hold():  # workers and processes starting at once queue each point once
            trials = self.study.get_trials(deepcopy=False)
            waiting = sum(1 for t in trials if t.state == TrialState.WAITING)
            reserved = self.final_window() if self.confirm else 0
            room = self.budget - budget.counted(trials) - waiting - reserved
            seen = [t.system_attrs.get("fixed_params", t.params) for t in trials]
            for label, point in points:
                if point in seen:  # run, running or queued already (an earlier run of the study)
                    continue
                seen.append(point)
                if room <= 0:
                    self.start_not_run.append((label, point))
                    continue
                self.study.enqueue_trial(point, skip_if_exists=True)
                room -= 1

    def _worker(self) -> None:
        while not self._stop.is_set():
            # A dead owner on this host is known at once; other hosts' only after the grace.
            budget.reap_orphans(self.study)
            optuna.storages.fail_stale_trials(self.study)
            with self.gate.hold():
                trials = self.study.get_trials(deepcopy=False)
                if budget.verdicts(trials) >= self.budget:
                    return
                trial = self._next_trial(trials)
            if trial is None:
                # The rest of the budget is running elsewhere: wait for its verdicts (or for
                # its owners to die, when it is queued again) rather than end short of it.
                if not self._told_waiting.is_set():
                    self._told_waiting.set()
                    logger.warning(
                        "the rest of the budget is running in other workers: waiting for their verdicts "
                        f"(a worker that died on another host is failed after the {GRACE_S} s grace)"
                    )
                self._stop.wait(WAIT_FOR_OTHERS_S)
                continue
            self._run_trial(trial)

    def _next_trial(self, trials: Sequence[FrozenTrial]) -> optuna.Trial | None:
        """The trial this worker runs next (under the budget gate); None when the budget is
        used up by trials running now."""
        counted = budget.counted(trials)
        if counted >= self.budget:
            return None
        rejected = budget.consecutive_rejections(trials)
        if rejected >= budget.MAX_CONSECUTIVE_REJECTIONS:
            raise StudyStopped(
                f"the last {rejected} proposals were all rejected by the engine's rules or the "
                "space's constraints; it leaves nearly nothing to launch (check its constraints)"
            )
        if self.confirm:
            self._queue_final(counted)
        trial = budget.ask(self.study)
        TrialWriter(trial).owner(ownership.current().as_dict())
        return trial

    def _run_trial(self, trial: optuna.Trial) -> None:
        frozen: FrozenTrial | None = None
        with Heartbeat(self.storage, trial._trial_id, self.storage.get_heartbeat_interval() or 0):
            try:
                value = self._objective(trial)
            except optuna.TrialPruned:
                frozen = self.study.tell(trial, state=TrialState.PRUNED)
            except (KeyboardInterrupt, Interrupted):
                self._record_interrupted(trial)
                raise
            except Exception as exc:
                TrialWriter(trial).error(exc)
                self.study.tell(trial, state=TrialState.FAIL)
                raise
            else:
                frozen = self.study.tell(trial, value)
        self._note_redrawn()
        if self.on_trial and frozen is not None:
            self.on_trial(self.study, frozen)
        if frozen is not None:
            self._after_launch(frozen)

    def _note_redrawn(self) -> None:
        """Add the proposals the sampler redrew since the last trial to the study's count."""
        sampler = self.study.sampler
        if not isinstance(sampler, IncumbentLocalSampler) or not sampler.redrawn:
            return
        drawn, sampler.redrawn = sampler.redrawn, 0
        total = int(self.study.user_attrs.get(trial_record.STUDY_REDRAWN, 0) or 0) + drawn
        self.study.set_user_attr(trial_record.STUDY_REDRAWN, total)

    def _after_launch(self, frozen: FrozenTrial) -> None:
        """Queue again a configuration whose launch failed for the host's reasons, and stop
        the study when launches keep failing the same way whatever the parameters."""
        failure_class = frozen.user_attrs.get(trial_record.FAILURE_CLASS)
        if failure_class not in SETUP_CLASSES:
            if trial_record.outcome(frozen) not in ("infeasible", "reused"):
                self._setup_failures.clear()
            return
        budget.requeue(self.study, frozen)
        reason = str(frozen.user_attrs.get(trial_record.REASON, ""))
        cause = re.sub(r"trial-\d+", "trial", reason)
        self._setup_failures.append((cause, frozen.user_attrs.get(trial_record.LOG_PATH)))
        causes = [c for c, _ in self._setup_failures]
        same = len(causes) >= SETUP_STOP_SAME and len(set(causes[-SETUP_STOP_SAME:])) == 1
        if same or len(causes) >= SETUP_STOP_ANY:
            raise StudyStopped(
                f"{len(causes)} launches in a row failed the same way whatever their settings; the host "
                f"cannot run the server: {reason}",
                log_path=self._setup_failures[-1][1],
            )

    def final_window(self) -> int:
        """Trials at the end of the budget that settle the recommendation (at least one when
        the study screens on a proxy: its leader must be measured on the target)."""
        window = min(CONFIRM_LAST, self.budget // 8)
        return max(window, 1) if self.screens else window

    def _queue_final(self, counted: int) -> None:
        """In the last :data:`CONFIRM_LAST` trials of the budget, settle the small effects
        that one launch cannot see.

        First the additive model's pick (:meth:`_model_pick`): the leader with the changes
        the whole study says gain something, launched once. When there is none left to
        launch, the leading configurations are launched again instead of new ones
        (best-arm identification, LUCB-style): one run cannot tell a better configuration
        from a lucky run of an equal one (see :mod:`tuner.estimates`). The leader (best
        score) and its closest challenger (best value plus one standard error) are compared;
        the one measured fewer times is launched again, until no challenger can beat the
        leader by more than :data:`INDIFFERENCE` (then the rest of the budget explores) or
        the budget ends.

        A study that screens on a proxy measures its leader on the target workload first
        when no launch of it has been (the recommendation rests on the target), and the
        model's pick on the target too; a re-measurement runs the proxy's levels alone
        where the proxy is part of the target (its value counts on the target's scale,
        :func:`tuner.estimates.target_factor`). A study with no configuration that
        meets the objective's constraints measures again the one that came within noise of
        them (:func:`tuner.estimates.near_floor`); one whose fastest configuration meets the
        floor on average but not with the confidence a recommendation needs measures that
        one again (up to :data:`NEAR_FLOOR_RUNS` launches).

        Before all of that, anywhere in the budget: a launch flagged as an outlier is
        measured again (:meth:`_queue_outlier_check`).
        """
        trials = self.study.get_trials(deepcopy=False)
        if self._queue_outlier_check(trials) or counted < self.budget - self.final_window():
            return
        if any(t.state == TrialState.WAITING for t in trials):
            return
        ev = estimates.evidence(trials)
        top = ev.leader()
        if top is None:
            near = estimates.near_floor(trials, ev.noise, NEAR_FLOOR_SD, NEAR_FLOOR_RUNS)
            if near is not None:
                self._measure_again(near)
            return
        if self.screens and not top.confirmed:
            self._measure_again(top.trial)
            return
        leader = ev.recommended()
        unsure = top.floor_odds < estimates.FLOOR_CONFIDENCE
        if leader is not None and top is not leader and unsure and top.runs < NEAR_FLOOR_RUNS:
            # The fastest configuration meets the floor on average but not by the margin a
            # recommendation needs (estimates.FLOOR_CONFIDENCE): another launch settles it.
            self._measure_again(top.trial)
            return
        if self.screens and leader is not None and not leader.confirmed:
            self._measure_again(leader.trial)
            return
        if leader is None or ev.model is None or len(ev.estimates) < 2:
            return
        ests, sigma = ev.estimates, ev.noise
        done = [t for t in trials if t.state in FINISHED]
        local = local_model(leader.trial, done, ev.noise)
        pick = self._model_pick(trials, leader, local) if local is not None else None
        if pick is not None:
            self.study.enqueue_trial(pick, user_attrs=queued_model_pick(leader.trial.number))
            return
        challenger = max((e for e in ests if e is not leader), key=lambda e: e.upper(sigma))
        if challenger.upper(sigma) <= leader.score(sigma) * (1 + INDIFFERENCE):
            return
        again = challenger if challenger.runs <= leader.runs else leader
        # Once a configuration has a launch on the target, the proxy's levels of another
        # launch measure its run-to-run luck as well, at a fraction of the server time: the
        # target/proxy ratio of its target launches puts them on the target's scale. One
        # never measured on the target is measured on it in the same launch where it leads.
        fidelity = "screen" if again.proxy_factor is None else "proxy"
        repeat = queued_repeat(again.trial.number, "target" if self.order is None else fidelity)
        self.study.enqueue_trial(dict(again.trial.params), user_attrs=repeat)

    def _check_outlier(self, trial: optuna.Trial, value: float | tuple[float, float]) -> None:
        """Flag the launch just measured when it is an outlier against the study's noise
        model (:func:`tuner.estimates.outlier`: it would change the recommendation, far
        from what the study expects of it). Its configuration is measured again by the
        next trial (:meth:`_queue_outlier_check`); until then ``tuner best`` prefers any
        unflagged configuration, and the re-measurement keeps or drops the flagged launch.
        Part of settling the recommendation: not in a study that does not confirm."""
        if not self.confirm or not isinstance(value, float):
            return
        trials = self.study.get_trials(deepcopy=False)
        running = next(t for t in trials if t.number == trial.number)
        launch = optuna.trial.create_trial(
            state=TrialState.COMPLETE,
            value=value,
            params=running.params,
            distributions=running.distributions,
            user_attrs=running.user_attrs,
            system_attrs=running.system_attrs,
        )
        launch.number = trial.number
        found = estimates.outlier([t for t in trials if t.number != trial.number], launch)
        if found is None:
            return
        TrialWriter(trial).outlier(found)
        logger.warning(
            f"trial #{trial.number}: {found['measured']:.0f} where the study expects "
            f"~{found['expected']:.0f} ({found['z']:+.1f} standard deviations): an outlier, measured "
            "again before it counts"
        )

    def _measure_again(self, trial: FrozenTrial) -> None:
        """Queue another launch of ``trial``'s configuration (the next trial)."""
        self.study.enqueue_trial(dict(trial.params), user_attrs=queued_repeat(trial.number))

    def _queue_outlier_check(self, trials: Sequence[FrozenTrial]) -> bool:
        """Queue a re-measurement of each flagged launch still awaiting one (none queued or
        running), on what it was measured on; :func:`tuner.budget.ask` runs it before
        anything else. True when one is queued or waiting."""
        checking = {
            t.user_attrs.get(trial_record.OUTLIER_CHECK)
            for t in trials
            if t.state in (TrialState.WAITING, TrialState.RUNNING)
        }
        queued = False
        for number, said in estimates.outlier_verdicts(trials).items():
            if said != estimates.PENDING:
                continue
            queued = True
            if number not in checking:
                flagged = next(t for t in trials if t.number == number)
                self.study.enqueue_trial(
                    dict(flagged.params),
                    user_attrs=queued_outlier_check(number, trial_record.fidelity(flagged)),
                )
        return queued

    def _model_pick(
        self, trials: Sequence[FrozenTrial], leader: estimates.Estimate, fitted: effects.Effects
    ) -> dict[str, Any] | None:
        """The leader with every parameter set to the measured value that the additive model
        (:mod:`tuner.effects`) expects to gain the most over the leader's own, where one is
        expected to gain at all; None when that changes nothing, breaks a launch rule or
        was measured already.

        The walk tried most single changes of the leader's values, each once and mostly from
        earlier incumbents, and a change worth 1-2% is below one launch's noise. Pooled
        over the whole study the model can tell such a change's sign, and two or three small
        gains together are worth a launch. A parameter the model cannot tell (a flat knob:
        expected gain near 0 either way) may change too; it costs nothing.
        """
        plan = dict(leader.trial.params)
        for name, current in leader.trial.params.items():
            gains = [
                (*fitted.gain(name, current, other), other)
                for other in fitted.values(name)
                if repr(other) != repr(current)
            ]
            # Only gains the study can tell from noise: on a noisy workload most small
            # effects flip sign from one launch to the next.
            sure = [(mean, other) for mean, sd, other in gains if mean > MODEL_PICK_Z * sd]
            if sure:
                plan[name] = max(sure, key=lambda g: g[0])[1]
        if plan == leader.trial.params:
            return None
        key = self._identity(plan)
        if key is None or key in {self._identity(dict(t.params)) for t in trials}:
            return None
        return plan

    def _record_interrupted(self, trial: optuna.Trial) -> None:
        """An interrupted trial is failed with reason ``interrupted``; its configuration is
        queued again so that rerunning the command measures it."""
        TrialWriter(trial).interrupted()
        frozen = self.study.tell(trial, state=TrialState.FAIL)
        budget.requeue(self.study, frozen)

    # --- one trial ----------------------------------------------------------------------
    def _objective(self, trial: optuna.Trial) -> float | tuple[float, float]:
        if self.on_start:
            self.on_start(trial.number)
        params = self.space.suggest(trial)
        key = self.space.key(params)
        spec = self.space.render(params)
        record = TrialWriter(trial)
        record.launch(key, spec.argv, spec.env, self.measurer.backend)
        reasons = self.space.check(params)
        if reasons:
            return self._infeasible(trial, reasons)
        verdict = self.measurer.preflight(spec)
        if verdict is not None and not verdict.ok:  # SGLang's own refusal, at zero launch cost
            record.preflight(ok=False, message=verdict.message)
            return self._infeasible(trial, [f"invalid-args: {verdict.message}"])
        intended = self._record_resolution(record, params, verdict)
        if self.reuse and not record.repeats:
            original = self._measured(record.server_key, trial.number)
            proxy_only = original is not None and trial_record.fidelity(original) != "target"
            if original is not None and not (record.wants_target and proxy_only):
                return self._reuse(trial, original)
        levels_done: list[int] = []
        workload, order, screened = self._plan(record.wants_target)
        proxy_levels = len(self.space.proxy.levels)
        so_far: list[Any] = []

        def on_level(i: int, metrics, goodput) -> bool:
            levels_done.append(metrics.concurrency)
            so_far.append((metrics, goodput))
            if self.on_level:
                self.on_level(trial.number, i, metrics)
            if self.prune:
                trial.report(self.objective.level_value(metrics, goodput), step=i)
                if trial.should_prune():
                    return False
            if i == proxy_levels - 1 and order is not None:
                # The proxy's value of this launch: what promotion judges, and (on a launch
                # that goes on to the whole target) the configuration's target/proxy ratio.
                proxy_value.append(self.objective.partial([m for m, _ in so_far], [g for _, g in so_far]))
                if screened:
                    # A repeat asked for on the proxy stays there: its configuration's target
                    # value is measured already, and like is compared with like. A repeat of a
                    # configuration never measured on the target goes on only where it leads.
                    within = 0.0 if record.repeats else PROMOTE_WITHIN_SD
                    promoted = record.may_promote and self._promote(proxy_value[0], within)
                    screening_stop.append(not promoted)
                    return promoted
            return True

        screening_stop: list[bool] = []
        proxy_value: list[float | None] = []
        m = self.measurer.measure(
            spec,
            workload,
            self.objective,
            trial_label=f"trial-{trial.number}",
            seed=self.requests_seed,
            on_level=on_level,
            levels=order,
            launch=(self.seed or 0) * 1_000_003 + trial.number,
            watch=lambda step, c: self._level_bar(step, c, [m for m, _ in so_far], repeat=record.repeats),
        )
        record.measurement(
            [lv.model_dump(exclude_none=True) for lv in sorted(m.levels, key=lambda lv: lv.concurrency)],
            m.server_s,
            m.startup_s,
            m.log_tail,
            m.server_info,
        )
        record.ran_on(m.log_path, m.python)
        if m.server_info and intended:
            differs = resolution.readback_differences(intended, m.server_info)
            if differs:  # the server runs with other settings than intended: shown on the trial
                record.server_differs(differs)
        if m.status == "failed":
            assert m.failure is not None
            return self._failed(trial, m.failure)
        stopped_after_screening = m.status == "stopped" and screening_stop == [True]
        if stopped_after_screening:
            m.status = "ok"
        promoted = screened and order is not None and screening_stop == [False]
        on_target = not screened or promoted
        record.fidelity("target" if on_target else "proxy")
        if on_target and len(so_far) == len(order or ()) and proxy_value and proxy_value[0] is not None:
            record.proxy_value(proxy_value[0])
        if m.status == "stopped":
            last = m.levels[-1]
            early = (
                f", stopped after {last.wall_s:.1f} s: projected {last.output_tok_s:.1f} tok/s"
                if last.stopped_early
                else ""
            )
            record.pruned(
                f"pruned at level {len(m.levels)} (C={levels_done[-1]}{early})",
                self.objective.partial(m.levels, m.goodputs),
            )
            raise optuna.TrialPruned()
        value = self.objective.value(m.levels, m.goodputs)
        violations = self.objective.violations(m.levels)
        for name, v in violations.items():
            trial.set_constraint(name, v)
        bad = {k: v for k, v in violations.items() if v > 0}
        if bad:
            record.missed(bad)
        record.complete()
        self._check_outlier(trial, value)
        return value

    def _level_bar(
        self, step: int, concurrency: int, measured: Sequence[LevelMetrics], *, repeat: bool
    ) -> LevelBar | None:
        """The bar a level of a trial must be able to reach while it runs, or it is stopped
        (:mod:`tuner.level_watch`; only where the study prunes, and only for objectives whose
        level value is the level's throughput, which a goodput's is not):

        * the pruner's: below it the trial is hopeless, and is pruned at that level (never
          a re-measurement's, which is never pruned);
        * for the peak objective, the peak of the levels this launch measured already (less
          :data:`PEAK_MARGIN`): a level that cannot raise it cannot change the trial's value
          (a finalist's C=32 level on the reference target, ~600 tok/s after ~2200 at C=256),
          so it is cut short and the sweep goes on.
        """
        pruner = self.study.pruner
        if not self.prune or self.objective.name == "goodput" or not isinstance(pruner, RelativeToBestPruner):
            return None
        hopeless = None if repeat else pruner.level_bar(self.study, step, concurrency)
        bars: list[LevelBar] = [] if hopeless is None else [hopeless]
        peak = max((m.output_tok_s for m in measured if m.concurrency > 1), default=None)
        if self.objective.name == "peak" and peak is not None and concurrency > 1:
            trials = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
            reference = trial_record.whole_level(trials, concurrency)
            if reference is not None:
                tokens, wall_s = reference
                bars.append(LevelBar((1 - PEAK_MARGIN) * peak, tokens, wall_s))
        return max(bars, key=lambda b: b.bar_tok_s) if bars else None

    def _plan(self, wants_target: bool) -> tuple[Any, tuple[int, ...] | None, bool]:
        """(the workload to run, the order of its levels, whether the trial is screened).

        A screened trial runs the target in screening order and stops after the proxy's
        levels unless promoted; a proxy that is no subset of the target runs on its own.
        """
        target, proxy = self.space.workload, self.space.proxy
        if not self.screens or (wants_target and self.order is None):
            return target, None, False
        if self.order is None:
            return proxy, None, True
        return target, self.order, not wants_target

    def _promote(self, value: float | None, within_sd: float) -> bool:
        """Whether a screened trial whose proxy value is ``value`` goes on to the target's
        other levels: in the last trials of the budget, when that value is within
        ``within_sd`` noise deviations of the leader's estimate (or there is no leader yet)."""
        if self.counted() - 1 < self.budget - self.final_window():  # this trial counts itself
            return False
        if value is None:
            return False
        ev = estimates.evidence(self.study.get_trials(deepcopy=False))
        top = ev.leader()
        if top is None:
            return True
        # The leader's estimate is on the target's scale; this value is the proxy's.
        bar = top.value / (top.proxy_factor or 1.0)
        return value >= bar * (1 - within_sd * ev.noise)

    def _worst(self) -> float | tuple[float, float]:
        return (0.0, 0.0) if self.objective.multi else 0.0

    def _infeasible(self, trial: optuna.Trial, reasons: list[str]) -> float | tuple[float, float]:
        trial.set_constraint("feasible", 1.0)
        TrialWriter(trial).infeasible(reasons)
        return self._worst()

    def _failed(self, trial: optuna.Trial, failure: LaunchFailure) -> float | tuple[float, float]:
        trial.set_constraint("launch", 1.0)
        TrialWriter(trial).launch_failed(failure.reason, failure.message)
        return self._worst()

    def _record_resolution(
        self, record: TrialWriter, params: dict[str, Any], verdict: Verdict | None
    ) -> dict[str, Any] | None:
        """Record the server ``params`` resolves to (SGLang's own resolution when the
        pre-flight ran) and the settings it silently rewrites; return that server."""
        resolved = dict(verdict.resolved) if verdict is not None else None
        if verdict is not None:
            record.preflight(ok=True, resolved=resolved)
        record.resolved_server(resolution.server_key(self.space, params, resolved))
        try:
            intended = resolution.identity(self.space, params, resolved)
            rewrites = resolution.rewrites(self.space, params, resolved)
        except LaunchFailure:
            return None
        if rewrites:
            record.rewrites(rewrites)
        return intended

    def _measured(self, key: str | None, number: int) -> FrozenTrial | None:
        """A trial that ran the same server (by the resolved server, see :mod:`tuner.resolution`);
        never a launch in doubt as an outlier, or dropped as one (:mod:`tuner.estimates`)."""
        trials = self.study.get_trials(deepcopy=False)
        doubtful = {n for n, v in estimates.outlier_verdicts(trials).items() if v != estimates.KEPT}
        for t in trials:
            if (
                t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                and t.number != number
                and budget.has_verdict(t)
                and trial_record.server_key(t) == key
                and trial_record.reused_from(t) is None
                and t.number not in doubtful
            ):
                return t
        return None

    def _reuse(self, trial: optuna.Trial, original: FrozenTrial) -> float | tuple[float, float]:
        """Copy an identical configuration's result instead of restarting the server."""
        record = TrialWriter(trial)
        record.reuse(original)
        for name, v in original.constraints.items():
            trial.set_constraint(name, v)
        record.reused_outcome(original)
        if original.state == TrialState.PRUNED:
            for step, v in original.intermediate_values.items():
                trial.report(v, step)
            raise optuna.TrialPruned()
        for step, v in original.intermediate_values.items():
            trial.report(v, step)
        values = original.values
        return tuple(values) if self.objective.multi else values[0]
