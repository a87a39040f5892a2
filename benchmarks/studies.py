"""Benchmark studies: the tuner, its variants and its peers, run on the simulated reference space.

Every strategy is a study of the tuner's own :class:`~tuner.study.Search` (the same trial
logic, storage and simulator backend as ``tuner search``), with the one thing that makes
it a different strategy swapped: the sampler, the start points, pruning, reuse, the rule
check or the sweep. A study's result is reduced to what the benchmarks score (see
:class:`StudyResult`): after each trial, the noise-free value of the configuration the
study would recommend at that point, and the simulated server time of each trial.

Strategies (``STRATEGIES``):

* ``tuner``: ``Search`` as ``tuner search`` builds it (IncumbentLocalSampler, the space's
  start points, rule check, pruning, reuse, the space's shortened sweep).
* ``random``: Optuna's RandomSampler in the same trial logic, no start points.
* ``grid``: the 8-candidate tiered grid of :data:`GRID` (SGLang auto_benchmark's manner).
* ``handpicked``: the reference campaign's 7 hand-picked configurations (:data:`HANDPICKED`).
* ``tpe``: plain TPE the way auto-tuning-vllm runs it: ``TPESampler()`` with its defaults,
  no start points, no pruning, no reuse, no rule check (an impossible combination is
  launched and fails; a failed trial is FAIL, which TPE ignores).
* ``no-prune``, ``full-sweep``, ``no-reuse``, ``all-off``: the tuner with pruning, the
  shortened sweep (replaced by the reference full sweep), reuse, or all three switched off.

Peers of the benchmark suite (``PEERS``; benchmarks/suite.py names them without the
``peer-`` prefix): ``tuner search``'s trial logic exactly (the rule check before any launch,
pruning, reuse of a configuration already measured, the space's start points, the
screening proxy and the confirmation trials at the end of the budget), with only the
sampler swapped, so that a difference is the sampler's:

* ``peer-random``: ``RandomSampler``;
* ``peer-tpe``: ``TPESampler`` with its defaults;
* ``peer-tpe-mv``: ``TPESampler(multivariate=True, group=True)`` (the space is conditional);
* ``peer-gp``: ``GPSampler`` (needs torch and scipy: the ``bench`` extra; see
  :class:`_GPSampler` for how it reads the trials' constraints);
* ``peer-cmaes``: ``CmaEsSampler`` on the numeric parameters, its independent sampler
  (random) on the others; only where a space has a numeric parameter (:func:`applies`).

Every sampler is seeded with the job's seed and given no constraints function: a rejected
or failed trial reaches it as a value of 0 and through the constraints the study sets on
the trial (Optuna 5's samplers read ``trial.constraints``; CMA-ES ignores them). The time
spent inside the sampler is measured (:class:`TimedSampler`) for every strategy.

The tuner screens trials on the space's proxy and measures its finalists on the target
workload; the peers, which have no such phase, measure every trial on the target, as do
``full-sweep`` and ``all-off``. The recommendation of every study is scored noise-free on
the space's target workload (as ``space_best.py`` scores).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import _blas  # noqa: F401  (before numpy: pins OpenBLAS's kernels)
import numpy as np
import optuna
from _common import space_named, space_objective
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler
from space_best import true_value

from tuner import budget, estimates
from tuner.budget import StudyStopped
from tuner.failures import LaunchFailure
from tuner.measurers import Measurement, SimMeasurer
from tuner.sim.calibration import REFERENCE_NCCL
from tuner.sim.serving import DEFAULT_NOISE
from tuner.space import Space
from tuner.study import Search

# A failed launch of the plain-TPE peer returns NaN on purpose (Optuna records it as FAIL).
warnings.filterwarnings("ignore", message="The value nan is not acceptable")
# The CMA-ES peer is told the trials' constraints like every sampler and ignores them, as said.
warnings.filterwarnings("ignore", message="Constraints have been set, but CmaEsSampler")

#: Server time charged for a launch SGLang refuses while parsing its arguments (Python
#: imports and the argument checks, before any weights load; estimate). The simulator's
#: backend charges a full start-up for every failed launch; only the peers that skip the
#: rule check ever launch such a configuration, so this keeps their cost honest.
ARG_CHECK_S = 20.0

#: The reference campaign's flags for every hand-picked configuration (tuner/sim/calibration.py).
_REFERENCE = {"max_running_requests": 256, "num_continuous_decode_steps": 8, "mem_fraction_static": 0.88}
_TUNED_NCCL = {
    "nccl_proto": REFERENCE_NCCL["NCCL_PROTO"],
    "nccl_min_nchannels": int(REFERENCE_NCCL["NCCL_MIN_NCHANNELS"]),
    "nccl_max_nchannels": int(REFERENCE_NCCL["NCCL_MAX_NCHANNELS"]),
    "nccl_nthreads": int(REFERENCE_NCCL["NCCL_NTHREADS"]),
    "nccl_buffsize": int(REFERENCE_NCCL["NCCL_BUFFSIZE"]),
}
#: The reference campaign's hand-picked list, in the order a person ran it. NCCL settings
#: are left at their defaults except in the last one, which adds the campaign's NCCL tuning.
HANDPICKED: dict[str, dict[str, Any]] = {
    "TP8": {"layout": "tp8", "ep_size": 1, **_REFERENCE},
    "EP8": {"layout": "tp8", "ep_size": 8, "enable_eplb": False, **_REFERENCE},
    "EP8 + EPLB": {"layout": "tp8", "ep_size": 8, "enable_eplb": True, **_REFERENCE},
    "EP4": {"layout": "tp8", "ep_size": 4, "enable_eplb": False, **_REFERENCE},
    "TP8 no CUDA graphs": {"layout": "tp8", "ep_size": 1, "disable_cuda_graph": True, **_REFERENCE},
    "PP8": {"layout": "pp8", "ep_size": 1, **_REFERENCE},
    "TP8 + NCCL tuning": {"layout": "tp8", "ep_size": 1, **_REFERENCE, **_TUNED_NCCL},
}

#: A tiered grid in the manner of SGLang's auto_benchmark: a grid over server flags in
#: three tiers (parallelism layout, then batching, then memory), at most 8 candidates.
#: Two values per tier, 2 x 2 x 2 = 8: the two layouts a person knows to try on 8 GPUs
#: (TP8, TP8 + EP8), the request cap at the reference value and doubled, and the static
#: memory fraction either side of SGLang's derived default (~0.88 on these cards).
#: Everything else (decode steps, CUDA graphs, NCCL variables) stays at SGLang's defaults:
#: the tool grids the flags it is given and does not tune environment variables.
GRID_TIERS: tuple[tuple[str, tuple[dict[str, Any], ...]], ...] = (
    ("parallelism", ({"layout": "tp8", "ep_size": 1}, {"layout": "tp8", "ep_size": 8, "enable_eplb": False})),
    ("batching", ({"max_running_requests": 256}, {"max_running_requests": 512})),
    ("memory", ({"mem_fraction_static": 0.85}, {"mem_fraction_static": 0.90})),
)
GRID: list[dict[str, Any]] = [
    {**a, **b, **c} for a in GRID_TIERS[0][1] for b in GRID_TIERS[1][1] for c in GRID_TIERS[2][1]
]


@dataclass(frozen=True)
class Job:
    """One study to run: a strategy, a seed, a budget of trials."""

    strategy: str
    seed: int
    budget: int
    noise: float = DEFAULT_NOISE
    #: JSON list of configurations measured first after the space's start points
    #: (``Search(extra_start=...)``); JSON so that a job is hashable.
    extra_start: str = "[]"
    #: The space studied (a space of the project, by name).
    space: str = "kimi-k2.6-8x-rtx-pro-6000"

    @property
    def key(self) -> tuple:
        return (self.strategy, self.seed, self.budget, self.noise, self.extra_start, self.space)


@dataclass
class StudyResult:
    """What a benchmark needs from one finished study.

    ``rec_value[n-1]`` is the noise-free value (tok/s, the space's sweep) of the configuration
    the study recommends after its first ``n`` trials (0 while none is feasible);
    ``server_s[n-1]`` is trial n's simulated server time (start-up + measured levels).
    ``trial_value`` is the noise-free value of every trial's own configuration (0 for one
    the rules refuse): for the hit rate of a random draw, and for telling a search that
    never launched a configuration near the best from one that launched it and recommended
    another (:meth:`launched_within`). ``verdict[n-1]``: whether trial n used
    up the budget (a launch or a reuse; a proposal the rules reject does not, see
    :mod:`tuner.budget`); ``sampler_s``: seconds spent inside the sampler over the study.
    A study stopped early (:class:`~tuner.budget.StudyStopped`) is scored on the trials it ran.
    """

    job: Job
    rec_value: list[float]
    server_s: list[float]
    outcomes: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    trial_value: list[float] | None = None
    verdict: list[bool] | None = None
    sampler_s: float = 0.0
    #: Why the study stopped before its budget (``StudyStopped``: e.g. 50 rejected proposals
    #: in a row); None when it used its budget.
    stopped: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "job": asdict(self.job)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StudyResult:
        return cls(**{**data, "job": Job(**data["job"])})

    def trials_within(self, budget: int | None) -> int | None:
        """How many of the study's trials it took to use up ``budget`` (launches and reuses,
        see :mod:`tuner.budget`: a proposal the rules reject is free), all of them when it
        used less; None (all) for no budget. Every trial counts when the study recorded no
        verdicts."""
        if budget is None or self.verdict is None:
            return budget
        used = 0
        for n, counted in enumerate(self.verdict, start=1):
            used += counted
            if used >= budget:
                return n
        return len(self.verdict)

    def final(self, budget: int | None = None) -> float:
        """Noise-free value of the recommendation once ``budget`` is used up (default: at the
        end of the study)."""
        values = self.rec_value[: self.trials_within(budget)]
        return values[-1] if values else 0.0

    def trials_to(self, target: float, budget: int | None = None) -> int | None:
        """First trial count whose recommendation is worth at least ``target`` within
        ``budget``; None if never."""
        for n, v in enumerate(self.rec_value[: self.trials_within(budget)], start=1):
            if v >= target:
                return n
        return None

    def launched_within(self, target: float) -> bool | None:
        """Whether any trial launched a configuration worth at least ``target`` (noise-free);
        None for a result stored without trial values."""
        if self.trial_value is None:
            return None
        return any(v >= target for v in self.trial_value)

    def server_h(self, budget: int | None = None) -> float:
        return sum(self.server_s[: self.trials_within(budget)]) / 3600

    def launches_to(self, target: float, budget: int | None = None) -> int | None:
        """Budget used (trials with a verdict, see :mod:`tuner.budget`) when the recommendation
        first is worth at least ``target`` within ``budget``; None if never. Every trial
        counts when the study recorded no verdicts."""
        used = 0
        for n, v in enumerate(self.rec_value[: self.trials_within(budget)]):
            used += 1 if self.verdict is None or self.verdict[n] else 0
            if v >= target:
                return max(used, 1)
        return None

    def rejected_share(self) -> float:
        """Share of the study's trials that were proposals the engine rules or the space's
        constraints rejected (outcome ``infeasible``)."""
        total = sum(self.outcomes.values())
        return self.outcomes.get("infeasible", 0) / total if total else 0.0

    def sampler_ms_per_trial(self) -> float:
        return 1e3 * self.sampler_s / len(self.rec_value) if self.rec_value else 0.0


class TimedSampler(BaseSampler):
    """A sampler that adds up the time spent inside another (its per-trial overhead);
    everything else is the wrapped sampler's."""

    def __init__(self, inner: BaseSampler):
        self.inner = inner
        self.seconds = 0.0

    def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.seconds += time.perf_counter() - t0

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return self._timed(self.inner.infer_relative_search_space, study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: Any, search_space: dict[str, Any]
    ) -> dict[str, Any]:
        return self._timed(self.inner.sample_relative, study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: Any, name: str, distribution: Any) -> Any:
        return self._timed(self.inner.sample_independent, study, trial, name, distribution)

    def before_trial(self, study: optuna.Study, trial: Any) -> None:
        self._timed(self.inner.before_trial, study, trial)

    def after_trial(self, study: optuna.Study, trial: Any, state: Any, values: Any) -> None:
        self._timed(self.inner.after_trial, study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# --- measurers and search variants ------------------------------------------------------------
class BenchMeasurer(SimMeasurer):
    """The simulator measurer; a launch refused at argument parsing costs :data:`ARG_CHECK_S`."""

    def measure(self, *args: Any, **kwargs: Any) -> Measurement:
        m = super().measure(*args, **kwargs)
        if m.status == "failed" and m.failure is not None and m.failure.reason == "invalid-args":
            m.startup_s = m.server_s = ARG_CHECK_S
        return m


class _NoRules:
    """A space whose rule check passes everything: impossible combinations get launched."""

    def __init__(self, space: Space):
        self._space = space

    def __getattr__(self, name: str) -> Any:
        return getattr(self._space, name)

    def check(self, params: Any) -> list[str]:
        return []


class _FailedIsFail(Search):
    """A failed launch is an Optuna FAIL (returning NaN does that), not a 0 with a constraint."""

    def _failed(self, trial: optuna.Trial, failure: LaunchFailure) -> float:
        super()._failed(trial, failure)
        return math.nan


@cache
def _space(name: str, full_sweep: bool = False) -> Space:
    """The space of a job; ``full_sweep``: every trial measured on the whole target (no proxy)."""
    space = space_named(name)
    if not full_sweep:
        return space
    spec = space.spec.model_copy(update={"proxy": "none", "workload": space.workload})
    return Space(spec, source=space.source)


def _search(
    job: Job,
    tmp: str,
    *,
    space: Any = None,
    cls: type[Search] = Search,
    sampler: optuna.samplers.BaseSampler | None = None,
    **kwargs: Any,
) -> Search:
    space = space if space is not None else _space(job.space)
    search = cls(
        space,
        BenchMeasurer(space.hardware, space.model, noise=job.noise),
        study_name="bench",
        storage=f"sqlite:///{tmp}/bench.db",
        objective=space_objective(space),
        seed=job.seed,
        budget=job.budget,
        **kwargs,
    )
    if sampler is not None:
        search.study.sampler = sampler
    return search


def _fixed_list(job: Job, tmp: str, configs: Iterable[dict[str, Any]]) -> Search:
    """Measure a fixed list of configurations, in order, once each (the budget is the list)."""
    space = _space(job.space)
    points = [space.effective(space.complete(c)) for c in configs]
    search = _search(
        job,
        tmp,
        warm_start=False,
        prune=False,
        reuse=False,
        confirm=False,
        sampler=optuna.samplers.RandomSampler(seed=job.seed),
    )
    search.budget = len(points)
    for p in points:
        search.study.enqueue_trial(p)
    return search


def tuner_study(job: Job, tmp: str, space: Space | None = None) -> Search:
    """``tuner search``'s study of ``job``: on its named space, or on ``space``, one built in
    memory from it (another start list: benchmarks/start_bundles.py)."""
    return _search(job, tmp, space=space, extra_start=json.loads(job.extra_start))


def _worst_constraint(*args: Any) -> tuple[np.ndarray, np.ndarray]:
    """One constraint per trial: its worst (largest) constraint value, 0 (met) when it has none.

    The trials are the reader's last argument: Optuna 5.0 passes ``(study, trials)``, 5.1
    ``(trials)``."""
    trials = args[-1]
    vals = np.array([[max(t.constraints.values(), default=0.0)] for t in trials], dtype=float)
    vals = vals.reshape(len(trials), 1)
    return vals, vals[:, 0] <= 0


class _GPSampler(optuna.samplers.GPSampler):
    """Optuna's GPSampler, told one constraint per trial: the worst of the trial's own.

    GPSampler models each constraint and needs the same ones on every trial, for the whole
    study; the study sets each only where it applies (``feasible`` on a rejected proposal,
    ``launch`` on a failed launch, ``min_single_stream`` on a measured trial), which stops
    it ("The number of constraints must be the same for all trials"). Its module's reader
    is swapped for :func:`_worst_constraint` while it samples (feasible exactly when every
    constraint is met, as before); nothing else changes.
    """

    def sample_relative(
        self, study: optuna.Study, trial: Any, search_space: dict[str, Any]
    ) -> dict[str, Any]:
        from optuna.samplers._gp import sampler as gp_module

        original = gp_module._get_constraint_vals_and_feasibility
        gp_module._get_constraint_vals_and_feasibility = _worst_constraint
        try:
            return super().sample_relative(study, trial, search_space)
        finally:
            gp_module._get_constraint_vals_and_feasibility = original


def _cmaes(seed: int) -> BaseSampler:
    # Categorical parameters go to its independent sampler (RandomSampler(seed), the default).
    return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)


#: The suite's peers: the sampler each swaps into ``tuner search``'s trial logic, by seed.
PEER_SAMPLERS: dict[str, Callable[[int], BaseSampler]] = {
    "peer-random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
    "peer-tpe": lambda seed: optuna.samplers.TPESampler(seed=seed),
    "peer-tpe-mv": lambda seed: optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True),
    "peer-gp": lambda seed: _GPSampler(seed=seed, warn_independent_sampling=False),
    "peer-cmaes": _cmaes,
}


def _peer(name: str) -> Callable[[Job, str], Search]:
    """A peer: the tuner's study (rules, pruning, reuse, start points, confirmation) with
    only the sampler swapped."""
    return lambda job, tmp: _search(job, tmp, sampler=PEER_SAMPLERS[name](job.seed))


def applies(strategy: str, space: Space) -> bool:
    """Whether a strategy applies to a space: CMA-ES needs a numeric parameter."""
    if strategy != "peer-cmaes":
        return True
    return any(isinstance(d, FloatDistribution | IntDistribution) for d in space.distributions().values())


STRATEGIES: dict[str, Callable[[Job, str], Search]] = {
    "tuner": tuner_study,
    "random": lambda job, tmp: _search(
        job, tmp, warm_start=False, confirm=False, sampler=optuna.samplers.RandomSampler(seed=job.seed)
    ),
    "grid": lambda job, tmp: _fixed_list(job, tmp, GRID),
    "handpicked": lambda job, tmp: _fixed_list(job, tmp, HANDPICKED.values()),
    "tpe": lambda job, tmp: _search(
        job,
        tmp,
        space=_NoRules(_space(job.space)),
        cls=_FailedIsFail,
        warm_start=False,
        prune=False,
        reuse=False,
        confirm=False,
        sampler=optuna.samplers.TPESampler(seed=job.seed),
    ),
    "no-prune": lambda job, tmp: _search(job, tmp, prune=False),
    "full-sweep": lambda job, tmp: _search(job, tmp, space=_space(job.space, full_sweep=True)),
    "no-reuse": lambda job, tmp: _search(job, tmp, reuse=False),
    "all-off": lambda job, tmp: _search(
        job, tmp, space=_space(job.space, full_sweep=True), prune=False, reuse=False
    ),
    **{name: _peer(name) for name in PEER_SAMPLERS},
}


# --- running and scoring -----------------------------------------------------------------------
#: Noise-free values already computed in this worker process, per space: two spaces may
#: launch the same server (same flags and environment) and judge it on other workloads.
_TRUTH: dict[str, dict[str, float]] = {}


def recommendations(study: optuna.Study) -> list[dict[str, Any] | None]:
    """The configuration ``tuner best`` would recommend after each trial (``best_record`` on
    the first n trials)."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    out: list[dict[str, Any] | None] = []
    for n in range(1, len(trials) + 1):
        best = estimates.best(trials[:n])
        out.append(dict(best.trial.params) if best is not None else None)
    return out


def run_study(job: Job) -> StudyResult:
    """Run one study and score its recommendations noise-free (in a worker process)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _one_thread()
    space = _space(job.space)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        search = STRATEGIES[job.strategy](job, tmp)
        timed = TimedSampler(search.study.sampler)
        search.study.sampler = timed
        stopped = None
        try:
            search.run()
        except StudyStopped as exc:  # the study ends there, as `tuner search` does
            stopped = str(exc)
        study = search.study
        trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
        wall = time.perf_counter() - t0
        recs = recommendations(study)
        server_s = [float(t.user_attrs.get("server_s", 0.0)) for t in trials]
        verdict = [budget.has_verdict(t) for t in trials]
        drawn = [dict(t.params) for t in trials]
        outcomes: dict[str, int] = {}
        for t in trials:
            o = t.user_attrs.get("outcome", t.state.name.lower())
            outcomes[o] = outcomes.get(o, 0) + 1
    truth = _TRUTH.setdefault(job.space, {})
    rec_value = [0.0 if p is None else true_value(space, space.complete(p), truth) for p in recs]
    trial_value = [true_value(space, space.complete(p), truth) for p in drawn]
    return StudyResult(job, rec_value, server_s, outcomes, wall, trial_value, verdict, timed.seconds, stopped)


def _one_thread() -> None:
    """One thread per worker process for torch (the GP sampler): the workers are the
    parallelism, and the machine's cores are shared."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


def run_jobs(
    jobs: list[Job],
    n_jobs: int = 2,
    *,
    log: Callable[[str], None] | None = print,
    on_result: Callable[[StudyResult], None] | None = None,
) -> list[StudyResult]:
    """Run the jobs (distinct ones once) on ``n_jobs`` processes; results in the jobs' order.
    ``on_result`` is called with each result as it arrives (a cache that keeps what finished
    when a long run is stopped)."""
    from joblib import Parallel, delayed

    unique = list({j.key: j for j in jobs}.values())
    # Longest first (full sweeps, long budgets) keeps both workers busy to the end.
    cost = {"full-sweep": 3.0, "all-off": 4.0, "no-prune": 1.5, "tpe": 1.2, "peer-gp": 5.0}
    unique.sort(key=lambda j: -j.budget * cost.get(j.strategy, 1.0))
    done: dict[tuple, StudyResult] = {}
    t0 = time.perf_counter()
    results = Parallel(n_jobs=n_jobs, return_as="generator_unordered")(delayed(run_study)(j) for j in unique)
    for r in results:
        done[r.job.key] = r
        if on_result is not None:
            on_result(r)
        if log is not None:
            name = r.job.strategy + ("+start" if r.job.extra_start != "[]" else "")
            log(
                f"  [{len(done):3d}/{len(unique)}] {name:12s} seed {r.job.seed:2d}: "
                f"{len(r.rec_value)} trials, {r.server_h():.1f} server h, {r.wall_s:.1f} s "
                f"(elapsed {time.perf_counter() - t0:.0f} s)"
            )
    return [done[j.key] for j in jobs]


def median_or_none(values: Iterable[int | None]) -> float | None:
    """Median where None (never reached) counts as infinitely many trials; None if that is
    where the median falls."""
    xs = sorted(math.inf if v is None else v for v in values)
    if not xs:
        return None
    m = float(np.median(xs))
    return None if math.isinf(m) else m
