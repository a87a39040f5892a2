"""What a trial records, in one place: the keys of its user attributes, the typed record
read from them, and the writer that stores them.

Everything a person or ``tuner best`` needs later lives in a trial's user attributes, so
any Optuna storage is the whole state of a study. The search loop writes them only
through :class:`TrialWriter`; every reader (the report, the dashboard's notes, progress
lines, the estimates, the commands) reads a :class:`TrialRecord` or the accessors
below, never an attribute by its string key.

Studies written before the launch command was stored as ``argv`` stored it as ``flags``;
:func:`argv` reads either.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner import redact
from tuner.engines.base import KV_CACHE_KEY, MEMORY_LEFT_KEY

# --- attribute keys ---------------------------------------------------------------------
#: What happened: complete, reused, pruned, infeasible or failed.
OUTCOME = "outcome"
#: Canonical identity of the configuration (:meth:`tuner.space.Space.key`).
CONFIG_KEY = "config_key"
#: The whole launch command (program, module and engine flags).
ARGV = "argv"
#: The launch command under its former name (read only, for older study databases).
LEGACY_ARGV = "flags"
#: Environment variables of the launch.
ENV = "env"
#: Name of the measurer that ran the trial (sim, local, ssh, ...: ``--backend``).
BACKEND = "backend"
#: Per-level metrics (:class:`tuner.metrics.LevelMetrics` dumps), lowest concurrency first.
LEVELS = "levels"
#: Why the trial was pruned, refused or failed, or which constraints it missed.
REASON = "reason"
#: The class of a failed launch (oom, crash, timeout, ..., error, interrupted).
FAILURE_CLASS = "failure_class"
#: Constraints the measurement missed: ``{name: shortfall}``.
VIOLATIONS = "violations"
#: Server time charged to the trial (start-up plus the sweep), seconds.
SERVER_S = "server_s"
STARTUP_S = "startup_s"
#: The end of the server's log (failed launches).
LOG_TAIL = "log_tail"
#: What the server reported about itself (JSON-able).
SERVER_INFO = "server_info"
#: The trial whose results a reused trial copied.
REUSED_FROM = "reused_from"
#: A repeated measurement: the number of the trial it repeats.
REPEAT_OF = "repeat_of"
#: The additive model's pick: the number of the leader it improves on.
MODEL_PICK = "model_pick"
#: What a pruned trial measured of the objective before it was cut (a lower bound).
PARTIAL_VALUE = "partial_value"
#: Of a launch measured on the target in screening order: the objective over the proxy's
#: levels of that same launch, so that the configuration's proxy launches can be put on the
#: target's scale (:func:`tuner.estimates.target_factor`).
PROXY_VALUE = "proxy_value"
#: Which workload the value was measured on: ``target`` (all of the space's workload) or
#: ``proxy`` (the screening levels only, :mod:`tuner.fidelity`). Queued trials carry it as a
#: request. Trials of older studies measured the whole workload: ``target``.
FIDELITY = "fidelity"
#: The process that ran the trial (:class:`tuner.ownership.Owner` as a dict).
OWNER = "owner"
#: The server log of the trial, where the launcher wrote it.
LOG_PATH = "log_path"
#: The interpreter of the launch command on the host that ran it (absolute path).
PYTHON = "python"
#: A launch flagged as an outlier against the study's noise model
#: (:func:`tuner.estimates.outlier`): ``{expected, measured, z}``.
OUTLIER = "outlier"
#: A re-measurement of a flagged launch: that launch's trial number (runs before anything
#: else is launched).
OUTLIER_CHECK = "outlier_check"
#: Attributes a queued-again trial keeps from the trial it replaces.
QUEUE_ATTRS = (REPEAT_OF, MODEL_PICK, FIDELITY, OUTLIER_CHECK)

#: SGLang's own verdict on the launch from the serving host (:mod:`tuner.preflight`).
PREFLIGHT = "preflight"
#: The server the launch resolves to (:func:`tuner.resolution.server_key`): what reuse keys on.
SERVER_KEY = "server_key"
#: Settings the engine silently rewrites: ``{name: [asked, resolved]}``.
REWRITES = "rewrites"
#: Settings the healthy server reported that differ from the intended ones.
SERVER_DIFFERS = "server_differs"

# --- the study's own attributes -----------------------------------------------------------
STUDY_SPACE = "space"
STUDY_OBJECTIVE = "objective"
STUDY_ENGINE = "engine"
STUDY_WORKLOAD = "workload"
#: The proxy workload trials are screened on (equal to the workload when there is none).
STUDY_PROXY = "proxy"
#: Where the study's numbers come from (simulated, emulated, real; see tuner.statement).
STUDY_BACKEND = "measured_on"
#: Proposals the sampler drew again because the engine's rules or the space's constraints
#: rejected them (never trials, never launched): a count over the study's runs.
STUDY_REDRAWN = "redrawn_proposals"
#: The space's systemd unit settings, with the interpreter (``python``).
STUDY_UNIT = "unit"
#: Seed of the request set every trial of the study serves (set by the study's first run).
STUDY_REQUESTS_SEED = "requests_seed"

#: Attributes a reused trial copies from the trial it reuses.
_COPIED_ON_REUSE = (LEVELS, SERVER_INFO, REASON, FAILURE_CLASS, VIOLATIONS, FIDELITY)
#: Bytes of a server log kept on a trial.
LOG_TAIL_CHARS = 4000
#: Characters of a failure message kept in a reason.
REASON_CHARS = 300


# --- reading one attribute of a frozen trial (cheap: no record built) --------------------
def outcome(t: FrozenTrial) -> str:
    """The trial's outcome; ``stale`` for a trial Optuna failed (its worker stopped
    beating), else the state's name where the trial recorded none."""
    if OUTCOME not in t.user_attrs and t.state == TrialState.FAIL:
        return "stale"
    return str(t.user_attrs.get(OUTCOME, t.state.name.lower()))


def config_key(t: FrozenTrial) -> str | None:
    return t.user_attrs.get(CONFIG_KEY)


def argv(attrs: Mapping[str, Any]) -> list[str]:
    """The launch command stored in ``attrs`` (``argv``, or ``flags`` in older studies)."""
    return list(attrs.get(ARGV) or attrs.get(LEGACY_ARGV) or [])


def reused_from(t: FrozenTrial) -> int | None:
    return t.user_attrs.get(REUSED_FROM)


def violations(t: FrozenTrial) -> dict[str, float]:
    return dict(t.user_attrs.get(VIOLATIONS) or {})


def partial_value(t: FrozenTrial) -> float | None:
    return _number(t, PARTIAL_VALUE)


def proxy_value(t: FrozenTrial) -> float | None:
    return _number(t, PROXY_VALUE)


def _number(t: FrozenTrial, name: str) -> float | None:
    value = t.user_attrs.get(name)
    return float(value) if value is not None else None


def server_s(t: FrozenTrial) -> float:
    return float(t.user_attrs.get(SERVER_S, 0.0) or 0.0)


def memory_left_gib(t: FrozenTrial) -> float | None:
    """GPU memory a trial's server had left after start-up (see
    :attr:`TrialRecord.memory_left_gib`)."""
    return _server_figure(t.user_attrs, MEMORY_LEFT_KEY)


def kv_cache_gib(t: FrozenTrial) -> float | None:
    """The KV cache pool a trial's server allocated per GPU (GiB); None where its log did
    not say (:meth:`tuner.engines.base.Engine.memory_report`)."""
    return _server_figure(t.user_attrs, KV_CACHE_KEY)


def _server_figure(attrs: Mapping[str, Any], key: str) -> float | None:
    info = attrs.get(SERVER_INFO)
    value = info.get(key) if isinstance(info, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def server_key(t: FrozenTrial | optuna.Trial | _StoredTrial) -> str | None:
    """The resolved server a trial ran (its rendered configuration for older records)."""
    return t.user_attrs.get(SERVER_KEY, t.user_attrs.get(CONFIG_KEY))


def level_at(t: FrozenTrial, concurrency: int) -> dict[str, Any] | None:
    """The trial's stored metrics of its level at ``concurrency`` (a ``LevelMetrics`` as
    stored), or None when it did not measure that level."""
    return next((lv for lv in t.user_attrs.get(LEVELS) or [] if lv.get("concurrency") == concurrency), None)


def whole_level(trials: Sequence[FrozenTrial], concurrency: int) -> tuple[int, float] | None:
    """(output tokens, wall seconds) of a level at ``concurrency`` that some launch of the
    study ran to its end (the fastest such), or None: every trial serves the same requests,
    so its tokens are what any launch streams there (:mod:`tuner.level_watch`)."""
    whole = [
        lv
        for t in trials
        if REUSED_FROM not in t.user_attrs
        and (lv := level_at(t, concurrency)) is not None
        and not lv.get("stopped_early")
        and lv.get("output_tokens")
    ]
    if not whole:
        return None
    top = max(whole, key=lambda lv: lv["output_tok_s"])
    return int(top["output_tokens"]), float(top["wall_s"])


def fidelity(t: FrozenTrial) -> str:
    """``target`` or ``proxy``: what the trial's value was measured on."""
    return str(t.user_attrs.get(FIDELITY, "target"))


@dataclass
class TrialRecord:
    """The readable record of a trial (its user attributes, typed)."""

    number: int
    state: str
    outcome: str
    #: The objective's value (single-objective studies; None for a pareto study).
    value: float | None
    values: list[float] | None
    params: dict[str, Any]
    #: The raw user attributes, as stored.
    attrs: dict[str, Any]
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    levels: list[dict[str, Any]] = field(default_factory=list)
    #: None when the trial recorded none.
    reason: str | None = None
    failure_class: str | None = None
    violations: dict[str, float] = field(default_factory=dict)
    config_key: str | None = None
    backend: str | None = None
    server_s: float | None = None
    startup_s: float | None = None
    log_tail: str | None = None
    reused_from: int | None = None
    repeat_of: int | None = None
    model_pick: int | None = None
    #: ``target`` or ``proxy`` (see :data:`FIDELITY`).
    fidelity: str = "target"
    #: Settings the engine rewrites (see :data:`REWRITES`).
    rewrites: dict[str, Any] = field(default_factory=dict)
    #: Value reported at each level (step), for pruning.
    intermediate: dict[int, float] = field(default_factory=dict)
    distributions: dict[str, Any] = field(default_factory=dict, repr=False)
    #: Optuna's reason for a trial it failed itself (a stale worker).
    fail_reason: str | None = None
    #: Trials that launched this configuration and met its constraints (the best record only:
    #: see :func:`tuner.estimates.best_record`); ``mean`` is their mean objective value,
    #: ``estimate`` the configuration's value pooled with the rest of the study
    #: (:mod:`tuner.estimates`).
    runs: tuple[int, ...] = ()
    mean: float | None = None
    estimate: float | None = None
    #: Of ``runs``, the launches measured on the target workload (the best record only).
    target_runs: tuple[int, ...] = ()

    @classmethod
    def of(cls, t: FrozenTrial) -> TrialRecord:
        a = t.user_attrs
        return cls(
            number=t.number,
            state=t.state.name,
            outcome=outcome(t),
            value=t.value if t.values and len(t.values) == 1 else None,
            values=t.values,
            params=dict(t.params),
            attrs=dict(a),
            argv=argv(a),
            env=dict(a.get(ENV) or {}),
            levels=list(a.get(LEVELS) or []),
            reason=a.get(REASON),
            failure_class=a.get(FAILURE_CLASS),
            violations=dict(a.get(VIOLATIONS) or {}),
            config_key=a.get(CONFIG_KEY),
            backend=a.get(BACKEND),
            server_s=a.get(SERVER_S),
            startup_s=a.get(STARTUP_S),
            log_tail=a.get(LOG_TAIL),
            reused_from=a.get(REUSED_FROM),
            repeat_of=a.get(REPEAT_OF),
            model_pick=a.get(MODEL_PICK),
            fidelity=str(a.get(FIDELITY, "target")),
            rewrites=dict(a.get(REWRITES) or {}),
            intermediate=dict(sorted(t.intermediate_values.items())),
            distributions=dict(t.distributions),
            fail_reason=t.system_attrs.get("fail_reason"),
        )

    @property
    def feasible(self) -> bool:
        return self.state == "COMPLETE" and self.outcome in ("complete", "reused") and not self.violations

    @property
    def final_value(self) -> float | None:
        """The objective's value, or a pareto study's last value (peak)."""
        return self.values[-1] if self.values else None

    @property
    def measured(self) -> bool:
        """Its own server ran the whole sweep (not a copy, not cut short)."""
        return self.outcome == "complete" and bool(self.levels)

    @property
    def single(self) -> float | None:
        """Single-stream tok/s (the level at concurrency 1), if measured."""
        return next((lv["output_tok_s"] for lv in self.levels if lv.get("concurrency") == 1), None)

    def _peak_level(self) -> dict[str, Any] | None:
        multi = [lv for lv in self.levels if lv.get("concurrency", 0) > 1]
        return max(multi, key=lambda lv: lv["output_tok_s"]) if multi else None

    @property
    def peak(self) -> float | None:
        """The best tok/s of the levels above one stream."""
        top = self._peak_level()
        return top["output_tok_s"] if top else None

    @property
    def peak_c(self) -> int | None:
        """The concurrency of :attr:`peak`."""
        top = self._peak_level()
        return top["concurrency"] if top else None

    @property
    def memory_left_gib(self) -> float | None:
        """GPU memory the server had left after start-up (the tightest GPU's, GiB): how close
        the launch came to running out of memory; None where its log did not say
        (:meth:`tuner.engines.base.Engine.memory_report`)."""
        return _server_figure(self.attrs, MEMORY_LEFT_KEY)

    @property
    def kv_cache_gib(self) -> float | None:
        """The KV cache pool the server allocated per GPU (GiB): what the memory fraction
        leaves for the running requests' tokens; None where its log did not say."""
        return _server_figure(self.attrs, KV_CACHE_KEY)


@dataclass
class StudyInfo:
    """The study's own user attributes: what was searched, for what, with which engine."""

    space: str | None
    #: The objective's name (peak, single, pareto, ...).
    objective: str
    engine: str | None
    workload: dict[str, Any] | None
    #: The workload trials were screened on (None: the workload itself, or an older study).
    proxy: dict[str, Any] | None
    #: systemd unit settings (description, user, working_directory, environment_file, python).
    unit: dict[str, Any]
    #: Where the numbers come from (:func:`tuner.statement.backend_of`); None in older studies.
    backend: dict[str, Any] | None = None
    #: Proposals redrawn because the rules rejected them (:data:`STUDY_REDRAWN`).
    redrawn: int = 0

    @classmethod
    def of(cls, attrs: Mapping[str, Any]) -> StudyInfo:
        objective = attrs.get(STUDY_OBJECTIVE, {})
        name = objective.get("name", "peak") if isinstance(objective, Mapping) else str(objective)
        return cls(
            space=attrs.get(STUDY_SPACE),
            objective=name,
            engine=attrs.get(STUDY_ENGINE),
            workload=attrs.get(STUDY_WORKLOAD),
            proxy=attrs.get(STUDY_PROXY),
            unit=dict(attrs.get(STUDY_UNIT, {}) or {}),
            backend=attrs.get(STUDY_BACKEND),
            redrawn=int(attrs.get(STUDY_REDRAWN, 0) or 0),
        )


def write_study_info(
    study: optuna.Study,
    *,
    space: str,
    objective: Mapping[str, Any],
    engine: str,
    workload: Mapping[str, Any],
    unit: Mapping[str, Any],
    proxy: Mapping[str, Any] | None = None,
) -> None:
    """Store what a study searches (read back by :meth:`StudyInfo.of`)."""
    study.set_user_attr(STUDY_SPACE, space)
    study.set_user_attr(STUDY_OBJECTIVE, dict(objective))
    study.set_user_attr(STUDY_ENGINE, engine)
    study.set_user_attr(STUDY_WORKLOAD, dict(workload))
    if proxy is not None:
        study.set_user_attr(STUDY_PROXY, dict(proxy))
    study.set_user_attr(STUDY_UNIT, dict(unit))


def requests_seed(study: optuna.Study, default: int) -> int:
    """The seed of the requests every trial of ``study`` serves: the one its first run
    stored, or ``default`` (stored now). Resumed runs and parallel workers (whatever their
    ``--seed``) thus compare configurations on the same requests."""
    stored = study.user_attrs.get(STUDY_REQUESTS_SEED)
    if stored is None:
        study.set_user_attr(STUDY_REQUESTS_SEED, default)
        return default
    return int(stored)


def queued_repeat(number: int, fidelity: str = "target") -> dict[str, Any]:
    """Attributes of a trial queued to measure trial ``number``'s configuration again: on the
    target workload; on the proxy alone, never promoted (``"proxy"``: a configuration
    already measured on the target, whose proxy launches count on the target's scale,
    :func:`tuner.estimates.target_factor`); or screened and promoted only when its value
    would make it the leader (``"screen"``: a configuration never measured on the target)."""
    return {REPEAT_OF: number, FIDELITY: fidelity}


def queued_outlier_check(number: int, fidelity: str) -> dict[str, Any]:
    """Attributes of a trial queued to measure again the configuration of trial ``number``,
    whose launch was flagged as an outlier, on what that launch was measured on
    (``fidelity``): like is compared with like."""
    return {REPEAT_OF: number, OUTLIER_CHECK: number, FIDELITY: fidelity}


def queued_model_pick(leader: int) -> dict[str, Any]:
    """Attributes of a trial queued to launch the additive model's pick over ``leader``, on
    the target workload."""
    return {MODEL_PICK: leader, FIDELITY: "target"}


class _StoredTrial:
    """A running trial of the storage, written without an :class:`optuna.Trial` (another
    process's trial, reaped when that process died)."""

    def __init__(self, storage: optuna.storages.BaseStorage, trial_id: int):
        self.storage, self.trial_id = storage, trial_id

    def set_user_attr(self, key: str, value: Any) -> None:
        self.storage.set_trial_user_attr(self.trial_id, key, value)

    @property
    def user_attrs(self) -> dict[str, Any]:
        return self.storage.get_trial(self.trial_id).user_attrs


class TrialWriter:
    """The one place that stores a trial's attributes (the search loop's trial).

    Every value passes the redaction step (:mod:`tuner.redact`): a server log tail or a
    failure message never stores a known secret.
    """

    def __init__(self, trial: optuna.Trial | _StoredTrial):
        self.trial = trial

    @classmethod
    def stored(cls, storage: optuna.storages.BaseStorage, trial_id: int) -> TrialWriter:
        """A writer for a running trial known only by its id."""
        return cls(_StoredTrial(storage, trial_id))

    def _set(self, key: str, value: Any) -> None:
        self.trial.set_user_attr(key, redact.deep(value))

    def owner(self, owner: Mapping[str, Any]) -> None:
        """The process running the trial (:mod:`tuner.ownership`)."""
        self._set(OWNER, dict(owner))

    def ran_on(self, log_path: str | None, python: str | None) -> None:
        """Where the server's log is, and the launch command's interpreter on the host that
        ran it (what ``tuner best`` writes into the unit)."""
        if log_path:
            self._set(LOG_PATH, log_path)
        if python:
            self._set(PYTHON, python)

    @property
    def repeats(self) -> bool:
        """The trial was queued as a repeated measurement (:data:`REPEAT_OF`)."""
        return REPEAT_OF in self.trial.user_attrs

    @property
    def wants_target(self) -> bool:
        """The trial was queued to be measured on the target workload."""
        return self.trial.user_attrs.get(FIDELITY) == "target"

    @property
    def may_promote(self) -> bool:
        """A screened trial may go on to the target's other levels: any but a repeat queued
        on the proxy alone (:func:`queued_repeat`)."""
        return not self.repeats or self.trial.user_attrs.get(FIDELITY) == "screen"

    @property
    def server_key(self) -> str | None:
        return server_key(self.trial)

    def preflight(
        self, *, ok: bool, message: str | None = None, resolved: Mapping[str, Any] | None = None
    ) -> None:
        """SGLang's verdict from the serving host: a refusal's message, or the resolved settings."""
        verdict: dict[str, Any] = {"ok": ok}
        if message is not None:
            verdict["message"] = message
        if resolved is not None:
            verdict["resolved"] = _jsonable(dict(resolved))
        self._set(PREFLIGHT, verdict)

    def resolved_server(self, key: str) -> None:
        self._set(SERVER_KEY, key)

    def rewrites(self, changes: Mapping[str, Any]) -> None:
        self._set(REWRITES, _jsonable(dict(changes)))

    def server_differs(self, differences: Mapping[str, Any]) -> None:
        self._set(SERVER_DIFFERS, _jsonable(dict(differences)))

    def fidelity(self, value: str) -> None:
        """What the trial's value was measured on (``target`` or ``proxy``)."""
        self._set(FIDELITY, value)

    def proxy_value(self, value: float) -> None:
        """The objective over the proxy's levels of a launch measured on the target."""
        self._set(PROXY_VALUE, value)

    def launch(self, key: str, argv: Sequence[str], env: Mapping[str, str], backend: str) -> None:
        """What the trial launches: its configuration's identity, command and environment."""
        self._set(CONFIG_KEY, key)
        self._set(ARGV, list(argv))
        self._set(ENV, dict(env))
        self._set(BACKEND, backend)

    def measurement(
        self,
        levels: Sequence[dict[str, Any]],
        server_s: float,
        startup_s: float,
        log_tail: str,
        server_info: Mapping[str, Any],
    ) -> None:
        self._set(LEVELS, list(levels))
        self._set(SERVER_S, round(server_s, 3))
        self._set(STARTUP_S, round(startup_s, 3))
        if log_tail:
            self._set(LOG_TAIL, log_tail[-LOG_TAIL_CHARS:])
        if server_info:
            self._set(SERVER_INFO, _jsonable(server_info))

    def failed(self, failure_class: str, reason: str) -> None:
        self._set(OUTCOME, "failed")
        self._set(FAILURE_CLASS, failure_class)
        self._set(REASON, reason)

    def error(self, exc: BaseException) -> None:
        """The trial raised: recorded as failed with class ``error``."""
        self.failed("error", f"error: {type(exc).__name__}: {exc}"[:REASON_CHARS])

    def launch_failed(self, failure_class: str, message: str) -> None:
        self.failed(failure_class, f"{failure_class}: {message.splitlines()[0][:REASON_CHARS]}")

    def interrupted(self) -> None:
        self.failed("interrupted", "interrupted: the run was stopped (Ctrl-C or SIGTERM)")

    def orphaned(self, who: str) -> None:
        self.failed("orphaned", f"orphaned: the run that ran it ({who}) died; its configuration is queued")

    def pruned(self, reason: str, partial: float | None) -> None:
        self._set(OUTCOME, "pruned")
        self._set(REASON, reason)
        if partial is not None:
            self._set(PARTIAL_VALUE, partial)

    def infeasible(self, reasons: Sequence[str]) -> None:
        self._set(OUTCOME, "infeasible")
        self._set(REASON, "; ".join(reasons))
        self._set(SERVER_S, 0.0)

    def missed(self, bad: Mapping[str, float]) -> None:
        """Constraints the measurement missed (``{name: shortfall}``)."""
        self._set(VIOLATIONS, dict(bad))
        self._set(REASON, "infeasible: " + ", ".join(f"{k} short by {v:.1f}" for k, v in bad.items()))

    def complete(self) -> None:
        self._set(OUTCOME, "complete")

    def outlier(self, found: Mapping[str, float]) -> None:
        """The launch is an outlier against the study's noise model (what it measured, what
        was expected, how many standard deviations apart): re-measured before it counts."""
        self._set(OUTLIER, dict(found))

    def reuse(self, original: FrozenTrial) -> None:
        """Copy ``original``'s measurement (an identical configuration) instead of launching;
        the outcome is set by :meth:`reused_outcome` once the values are copied."""
        self._set(REUSED_FROM, original.number)
        self._set(SERVER_S, 0.0)
        for k in _COPIED_ON_REUSE:
            if k in original.user_attrs:
                self._set(k, original.user_attrs[k])

    def reused_outcome(self, original: FrozenTrial) -> None:
        if original.state == TrialState.PRUNED:
            self._set(OUTCOME, "pruned")
            return
        copied = original.user_attrs.get(OUTCOME, "complete")
        self._set(OUTCOME, "reused" if copied == "complete" else copied)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
