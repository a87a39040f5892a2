"""The Optuna study: one trial = one launch of the server with sampled settings.

Data flow of a trial: the space's sampler proposes parameters -> engine rules and the
space's constraints reject impossible combinations before any launch -> a configuration
already measured in this study is reused -> the launch is rendered (argv + env) -> the
backend starts the server and sweeps the levels lowest first, reporting each level to
Optuna, which may prune -> the objective value, constraints and records are stored on
the trial -> the server is stopped.

Everything a person or ``tuner best`` needs later lives in the trial's user attributes
(see :class:`TrialRecord`), so any Optuna storage is the whole state of a study.
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from tuner import effects, estimates, resolution
from tuner.backends import Backend, Interrupted, Measurement
from tuner.coordination import BudgetGate, Heartbeat
from tuner.failures import LaunchFailure
from tuner.objectives import Objective
from tuner.preflight import Verdict
from tuner.pruning import RelativeToBestPruner
from tuner.sampler import IncumbentLocalSampler
from tuner.space import Space

optuna.logging.set_verbosity(optuna.logging.WARNING)
# Heartbeats and metric names are marked experimental in Optuna 5; both are relied on here.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
# The worker loop uses ask/tell with its own heartbeat thread (tuner.coordination.Heartbeat).
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")

#: User attribute of a repeated measurement: the number of the trial it repeats.
REPEAT_OF = "repeat_of"
#: User attribute of the additive model's pick: the number of the leader it improves on.
MODEL_PICK = "model_pick"
#: Trials at the end of a budget that launch the additive model's pick and re-measure the
#: leading configurations (at most an eighth of the budget).
CONFIRM_LAST = 5
#: Configurations this close (relative) are as good as each other: settling their order is
#: not worth a launch.
INDIFFERENCE = 0.01
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
#: Directory of study databases, relative to the working directory.
STUDIES_DIR = Path("studies")
#: RDB heartbeat: a worker that stops beating for GRACE seconds has its trial failed and
#: retried once (Optuna's stale-trial machinery).
HEARTBEAT_S = float(os.environ.get("TUNER_HEARTBEAT_S", "30"))
GRACE_S = int(float(os.environ.get("TUNER_GRACE_S", "120")))


@dataclass
class TrialRecord:
    """The readable record of a trial (its user attributes)."""

    number: int
    state: str
    outcome: str
    value: float | None
    values: list[float] | None
    params: dict[str, Any]
    attrs: dict[str, Any]
    #: Trials that launched this configuration and met its constraints (the best record only:
    #: see :func:`best_record`); ``mean`` is their mean objective value, ``estimate`` the
    #: configuration's value pooled with the rest of the study (:mod:`tuner.estimates`).
    runs: tuple[int, ...] = ()
    mean: float | None = None
    estimate: float | None = None

    @classmethod
    def of(cls, t: FrozenTrial) -> TrialRecord:
        return cls(
            t.number,
            t.state.name,
            t.user_attrs.get("outcome", t.state.name.lower()),
            t.value if t.values and len(t.values) == 1 else None,
            t.values,
            dict(t.params),
            dict(t.user_attrs),
        )

    @property
    def feasible(self) -> bool:
        return (
            self.state == "COMPLETE"
            and self.outcome in ("complete", "reused")
            and not self.attrs.get("violations")
        )


def default_study_name(space: Space, objective: Objective) -> str:
    return space.name if objective.name == "peak" else f"{space.name}-{objective.name}"


def default_storage_url(study_name: str) -> str:
    STUDIES_DIR.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{STUDIES_DIR / study_name}.db"


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An RDB storage with heartbeats (stale trials failed and retried once)."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    if url.startswith("sqlite:///"):
        _enable_wal(url)
    last: Exception | None = None
    for attempt in range(8):
        try:
            return RDBStorage(
                url,
                heartbeat_interval=HEARTBEAT_S,
                grace_period=GRACE_S,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1),
                engine_kwargs={"pool_pre_ping": True} if not url.startswith("sqlite") else None,
            )
        except sqlalchemy.exc.DBAPIError as exc:
            # Workers starting at once race to create the schema; the loser finds it made.
            last = exc
            time.sleep(0.2 * (attempt + 1))
    assert last is not None
    raise last


def _enable_wal(url: str) -> None:
    """Write-ahead logging: readers (the dashboard) do not block the study, and a commit costs
    microseconds instead of a disk sync per trial attribute. The mode persists in the file."""
    import sqlite3

    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def redact_url(url: str) -> str:
    """Hide the password of a database URL (``user:***@host``)."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    if ":" in creds:
        creds = creds.split(":", 1)[0] + ":***"
    return f"{scheme}://{creds}@{host}"


def best_record(study: optuna.Study) -> TrialRecord | None:
    """The first trial of the best feasible configuration (pareto: by peak), judged by all its
    launches (:func:`tuner.estimates.best`); ``runs`` and ``mean`` say what it rests on."""
    best = estimates.best(study.get_trials(deepcopy=False))
    if best is None:
        return None
    return replace(TrialRecord.of(best.trial), runs=best.numbers, mean=best.mean, estimate=best.value)


class Search:
    """Runs a study to its budget of finished trials."""

    def __init__(
        self,
        space: Space,
        backend: Backend,
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
        self.backend = backend
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
        self.study_name = study_name
        sampler = IncumbentLocalSampler(seed=seed, identity=self._identity)
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
        self._stop = threading.Event()
        self.study.set_metric_names(
            ["single_stream_tok_s", "peak_tok_s"] if objective.multi else [f"{objective.name}_tok_s"]
        )
        self.study.set_user_attr("space", space.name)
        self.study.set_user_attr("objective", objective.model_dump())
        self.study.set_user_attr("engine", space.spec.engine)
        self.study.set_user_attr("workload", space.workload.model_dump(mode="json"))
        unit = space.launch.unit.model_dump() if space.launch.unit else {}
        self.study.set_user_attr("unit", {**unit, "python": space.launch.python})

    def _identity(self, params: dict[str, Any]) -> str | None:
        """Canonical configuration of a sampler proposal; None if the launch rules reject it."""
        try:
            full = self.space.complete(params)
            return None if self.space.check(full) else resolution.server_key(self.space, full)
        except ValueError:
            return None

    # --- budget -------------------------------------------------------------------------
    def finished(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=FINISHED))

    def counted(self) -> int:
        """Trials that use up the budget: finished ones and those running now."""
        return len(self.study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING)))

    def run(self, workers: int = 1) -> optuna.Study:
        """Run trials until the study has ``budget`` finished trials.

        ``workers`` > 1 runs that many trials at once in threads of this process: a trial
        mostly waits (a server loading, a sweep streaming), so threads suffice, share the
        storage's connection pool, and let Ctrl-C stop every server from one place. Ctrl-C
        (or SIGTERM) stops the running servers, records their trials as ``interrupted``
        (their configurations are queued again) and re-raises.
        """
        if self.warm_start:
            # The space's known-good configurations go first (once per study).
            for point in [*self.space.start_points(), *self.extra_start]:
                self.study.enqueue_trial(point, skip_if_exists=True)
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
            self.backend.interrupt()
            for t in threads:
                t.join()
            raise
        if errors:
            raise errors[0]
        return self.study

    def _worker(self) -> None:
        while not self._stop.is_set():
            optuna.storages.fail_stale_trials(self.study)
            with self.gate.hold():
                counted = self.counted()
                if counted >= self.budget:
                    return
                if self.confirm:
                    self._queue_final(counted)
                trial = self.study.ask()
            self._run_trial(trial)

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
                trial.set_user_attr("outcome", "failed")
                trial.set_user_attr("failure_class", "error")
                trial.set_user_attr("reason", f"error: {type(exc).__name__}: {exc}"[:300])
                self.study.tell(trial, state=TrialState.FAIL)
                raise
            else:
                frozen = self.study.tell(trial, value)
        if self.on_trial and frozen is not None:
            self.on_trial(self.study, frozen)

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
        """
        if counted < self.budget - min(CONFIRM_LAST, self.budget // 8):
            return
        trials = self.study.get_trials(deepcopy=False)
        if any(t.state == TrialState.WAITING for t in trials):
            return
        ev = estimates.evidence(trials)
        leader = ev.leader()
        if leader is None or ev.model is None or len(ev.estimates) < 2:
            return
        ests, sigma = ev.estimates, ev.noise
        pick = self._model_pick(trials, leader, ev.model)
        if pick is not None:
            self.study.enqueue_trial(pick, user_attrs={MODEL_PICK: leader.trial.number})
            return
        challenger = max((e for e in ests if e is not leader), key=lambda e: e.upper(sigma))
        if challenger.upper(sigma) <= leader.score(sigma) * (1 + INDIFFERENCE):
            return
        pick = challenger if challenger.runs <= leader.runs else leader
        self.study.enqueue_trial(dict(pick.trial.params), user_attrs={REPEAT_OF: pick.trial.number})

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
                (fitted.gain(name, current, other)[0], other)
                for other in fitted.values(name)
                if repr(other) != repr(current)
            ]
            gain, other = max(gains, key=lambda g: g[0], default=(0.0, current))
            if gain > 0:
                plan[name] = other
        if plan == leader.trial.params:
            return None
        key = self._identity(plan)
        if key is None or key in {self._identity(dict(t.params)) for t in trials}:
            return None
        return plan

    def _record_interrupted(self, trial: optuna.Trial) -> None:
        """An interrupted trial is failed with reason ``interrupted``; its configuration is
        queued again so that rerunning the command measures it."""
        trial.set_user_attr("outcome", "failed")
        trial.set_user_attr("failure_class", "interrupted")
        trial.set_user_attr("reason", "interrupted: the run was stopped (Ctrl-C or SIGTERM)")
        self.study.tell(trial, state=TrialState.FAIL)
        if trial.params:
            self.study.enqueue_trial(dict(trial.params), skip_if_exists=False)

    # --- one trial ----------------------------------------------------------------------
    def _objective(self, trial: optuna.Trial) -> float | tuple[float, float]:
        if self.on_start:
            self.on_start(trial.number)
        params = self.space.suggest(trial)
        key = self.space.key(params)
        spec = self.space.render(params)
        trial.set_user_attr("config_key", key)
        trial.set_user_attr("flags", spec.argv)
        trial.set_user_attr("env", spec.env)
        trial.set_user_attr("backend", self.backend.name)
        reasons = self.space.check(params)
        if reasons:
            return self._infeasible(trial, reasons)
        verdict = self.backend.preflight(spec)
        if verdict is not None and not verdict.ok:  # SGLang's own refusal, at zero launch cost
            trial.set_user_attr("preflight", {"ok": False, "message": verdict.message})
            return self._infeasible(trial, [f"invalid-args: {verdict.message}"])
        intended = self._record_resolution(trial, params, verdict)
        if self.reuse and REPEAT_OF not in trial.user_attrs:
            original = self._measured(trial.user_attrs["server_key"], trial.number)
            if original is not None:
                return self._reuse(trial, original)
        seed = (self.seed or 0) * 1_000_003 + trial.number
        levels_done: list[int] = []

        def on_level(i: int, metrics, goodput) -> bool:
            levels_done.append(metrics.concurrency)
            if self.on_level:
                self.on_level(trial.number, i, metrics)
            if not self.prune:
                return True
            trial.report(self.objective.level_value(metrics, goodput), step=i)
            return not trial.should_prune()

        m = self.backend.measure(
            spec,
            self.space.workload,
            self.objective,
            trial_label=f"trial-{trial.number}",
            seed=seed,
            on_level=on_level,
        )
        self._store_measurement(trial, m)
        if m.server_info and intended:
            differs = resolution.readback_differences(intended, m.server_info)
            if differs:  # the server runs with other settings than intended: shown on the trial
                trial.set_user_attr("server_differs", differs)
        if m.status == "failed":
            assert m.failure is not None
            return self._failed(trial, m.failure)
        if m.status == "stopped":
            trial.set_user_attr("outcome", "pruned")
            trial.set_user_attr("reason", f"pruned at level {len(m.levels)} (C={levels_done[-1]})")
            partial = self.objective.partial(m.levels, m.goodputs)
            if partial is not None:
                trial.set_user_attr(estimates.PARTIAL_VALUE, partial)
            raise optuna.TrialPruned()
        value = self.objective.value(m.levels, m.goodputs)
        violations = self.objective.violations(m.levels)
        for name, v in violations.items():
            trial.set_constraint(name, v)
        bad = {k: v for k, v in violations.items() if v > 0}
        if bad:
            trial.set_user_attr("violations", bad)
            trial.set_user_attr(
                "reason", "infeasible: " + ", ".join(f"{k} short by {v:.1f}" for k, v in bad.items())
            )
        trial.set_user_attr("outcome", "complete")
        return value

    def _worst(self) -> float | tuple[float, float]:
        return (0.0, 0.0) if self.objective.multi else 0.0

    def _infeasible(self, trial: optuna.Trial, reasons: list[str]) -> float | tuple[float, float]:
        trial.set_constraint("feasible", 1.0)
        trial.set_user_attr("outcome", "infeasible")
        trial.set_user_attr("reason", "; ".join(reasons))
        trial.set_user_attr("server_s", 0.0)
        return self._worst()

    def _failed(self, trial: optuna.Trial, failure: LaunchFailure) -> float | tuple[float, float]:
        trial.set_constraint("launch", 1.0)
        trial.set_user_attr("outcome", "failed")
        trial.set_user_attr("failure_class", failure.reason)
        trial.set_user_attr("reason", f"{failure.reason}: {failure.message.splitlines()[0][:300]}")
        return self._worst()

    def _store_measurement(self, trial: optuna.Trial, m: Measurement) -> None:
        trial.set_user_attr("levels", [lv.model_dump(exclude_none=True) for lv in m.levels])
        trial.set_user_attr("server_s", round(m.server_s, 3))
        trial.set_user_attr("startup_s", round(m.startup_s, 3))
        if m.log_tail:
            trial.set_user_attr("log_tail", m.log_tail[-4000:])
        if m.server_info:
            trial.set_user_attr("server_info", _jsonable(m.server_info))

    def _record_resolution(
        self, trial: optuna.Trial, params: dict[str, Any], verdict: Verdict | None
    ) -> dict[str, Any] | None:
        """Record the server ``params`` resolves to (SGLang's own resolution when the
        pre-flight ran) and the settings it silently rewrites; return that server."""
        resolved = dict(verdict.resolved) if verdict is not None else None
        if verdict is not None:
            trial.set_user_attr("preflight", {"ok": True, "resolved": _jsonable(resolved)})
        trial.set_user_attr("server_key", resolution.server_key(self.space, params, resolved))
        try:
            intended = resolution.identity(self.space, params, resolved)
            rewrites = resolution.rewrites(self.space, params, resolved)
        except LaunchFailure:
            return None
        if rewrites:
            trial.set_user_attr("rewrites", _jsonable(rewrites))
        return intended

    def _measured(self, key: str, number: int) -> FrozenTrial | None:
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            if t.number != number and _server_key(t) == key and "reused_from" not in t.user_attrs:
                return t
        return None

    def _reuse(self, trial: optuna.Trial, original: FrozenTrial) -> float | tuple[float, float]:
        """Copy an identical configuration's result instead of restarting the server."""
        trial.set_user_attr("reused_from", original.number)
        trial.set_user_attr("server_s", 0.0)
        for k in ("levels", "server_info", "reason", "failure_class", "violations"):
            if k in original.user_attrs:
                trial.set_user_attr(k, original.user_attrs[k])
        for name, v in original.constraints.items():
            trial.set_constraint(name, v)
        if original.state == TrialState.PRUNED:
            trial.set_user_attr("outcome", "pruned")
            for step, v in original.intermediate_values.items():
                trial.report(v, step)
            raise optuna.TrialPruned()
        outcome = original.user_attrs.get("outcome", "complete")
        trial.set_user_attr("outcome", "reused" if outcome == "complete" else outcome)
        for step, v in original.intermediate_values.items():
            trial.report(v, step)
        values = original.values
        return tuple(values) if self.objective.multi else values[0]  # type: ignore[return-value]


def _server_key(t: FrozenTrial) -> str | None:
    """The resolved server a trial ran (its rendered configuration for older records)."""
    return t.user_attrs.get("server_key", t.user_attrs.get("config_key"))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def resolve_storage(study_name: str | None, storage: str | None) -> tuple[str, str]:
    """(storage URL, study name) of an existing study; with no name, the newest in ./studies.

    Raises LookupError naming what is missing.
    """
    if storage is None:
        if study_name is None:
            dbs = sorted(STUDIES_DIR.glob("*.db"), key=os.path.getmtime)
            if not dbs:
                raise LookupError("no study found in ./studies (run `tuner search` first, or pass --storage)")
            storage = f"sqlite:///{dbs[-1]}"
        else:
            path = STUDIES_DIR / f"{study_name}.db"
            if not path.exists():
                raise LookupError(f"no study database {path} (pass --storage for another location)")
            storage = f"sqlite:///{path}"
    names = [s.study_name for s in optuna.get_all_study_summaries(_reader(storage))]
    if study_name is None:
        if not names:
            raise LookupError(f"no study in {redact_url(storage)}")
        study_name = names[-1]
    elif study_name not in names:
        raise LookupError(
            f"no study named {study_name!r} in {redact_url(storage)}; found: {', '.join(names) or 'none'}"
        )
    return storage, study_name


def _reader(url: str) -> optuna.storages.BaseStorage | str:
    return optuna.storages.RDBStorage(url) if "://" in url else url


def load_study(study_name: str | None, storage: str | None) -> optuna.Study:
    """Open an existing study for reading (see :func:`resolve_storage`)."""
    url, name = resolve_storage(study_name, storage)
    return optuna.load_study(study_name=name, storage=_reader(url))
