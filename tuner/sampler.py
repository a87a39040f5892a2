"""The study's sampler: TPE, plus local moves around the best configuration so far.

A serving study has a tiny budget (tens of trials, each a server restart) over a large,
mostly categorical space where a few knobs matter a lot and most matter a little.
TPE alone spends much of such a budget learning which knobs matter; a local search
around the incumbent finishes the job quickly once a good region is found. So after
the start-up trials, nine trials in ten are *local moves*: the best configuration so far
(see :mod:`tuner.estimates`) with one parameter changed, never a configuration already
measured. The others come from TPE, which keeps exploring. Both see the constraints of
earlier trials: infeasible and failed trials are never the incumbent, a move that failed
to launch is not tried again from an incumbent with no more GPU memory to spare
(:func:`_launch_odds`); a value found
hopeless (a pruned move, or the value that best explains the pruned launches of the study,
:func:`hopeless_values`: EPLB on PCIe) is proposed by neither again.

Which change comes next is decided by the additive model of the whole study
(:mod:`tuner.effects`): each candidate change is scored by its expected improvement over
the incumbent. A value measured elsewhere in the study carries its pooled effect; a value
not measured yet gets its parameter's own spread of effects as its uncertainty (a knob
whose values all measured alike near the incumbent is probably flat; one measured only far
from it is not known) and, for an ordered parameter, the trend
of its measured neighbours (a memory fraction that gained going up probably gains going
further up). A step up of the memory fraction is also expected to gain what it adds to the
KV cache pool while the pool binds (:func:`pool_gain`: the pool each launch reports, the
clients decoding at once by Little's law), a prior its own measurements are read against. A
change that ran out of GPU memory from the incumbent is offered again with the memory
fraction one step down (:meth:`IncumbentLocalSampler._room_making`): a walk that raised the
fraction first must be able to give back the room a later change needs.
A value measured only bundled with values of other parameters, in the same
launches (:func:`confounded_values`), is expected to lose nothing until it is measured
apart: the model cannot say which value of a bundle its loss belongs to. A change that
switches other parameters on or off (EP1 drops the EPLB and all-to-all settings that exist
only with expert parallelism) carries their effects too.
So the walk spends its launches on the knobs that matter on *this* space,
whatever they are, instead of a fixed or shuffled order.

While no configuration meets the objective's constraints (a single-stream floor), there is
no incumbent: the walk starts from the launch that came closest instead, and ranks its
moves by the additive model of how close each launch came (:func:`nearest_feasible`).
Once one does, a move is worth its expected improvement times its odds of still meeting
them (the constrained expected improvement), from the same model fitted around the
incumbent (:func:`floor_model`): a change that costs single-stream speed (expert
parallelism, a pipeline layout) is launched once, not again from each new incumbent.

Proposals the engine's rules or the space's constraints reject cost no launch, but they
are redrawn here rather than handed to the study: a TPE proposal is drawn again (up to
:data:`MAX_ATTEMPTS` times) until the rules accept it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState

from tuner import budget, effects, estimates, trial_record
from tuner.failures import MEMORY_CLASSES
from tuner.metrics import waited_for_room

#: Finished trials before local moves start (enqueued start points count: the reference
#: space has five, so the walk starts from the best of them). Over 20 seeds of the reference
#: study (benchmarks/search_efficiency.py), 5 and 0.9 reach within 2% of the space's best in
#: a median of 26 trials, against 37 with 8 and 0.8: an early TPE trial is nearly random
#: and a budget of 40 has few to spare.
LOCAL_AFTER = 5
#: Share of trials (after LOCAL_AFTER) that are local moves.
LOCAL_SHARE = 0.9
#: A stepped number moves at most this many steps in one random jump.
MAX_STEPS = 3
#: Steps a stepped number tries from the incumbent's value; the long jump only on grids of
#: more than :data:`LONG_GRID` values (a memory fraction in 0.01 steps: one step is within
#: noise, four cross most of the useful range in one launch).
STEPS = (1, 2)
LONG_STEP = 4
LONG_GRID = 8
#: A new best replaces the incumbent of the local walk only when its score is better by this
#: share. Scores pool the study's launches (tuner.effects), so they move less than one launch
#: (2% noise); over 60 seeds of the reference study (benchmarks/search_efficiency.py's
#: setting), 0, 1% and 2% reach within 2% of the space's best in 52, 55 and 52 seeds: 0
#: restarts the walk on noise, 2% keeps it on a configuration 1-2% short.
INCUMBENT_MARGIN = 0.01
#: Weight, in measured values, of :data:`tuner.effects.EFFECT_PRIOR` in a parameter's
#: spread of effects (the uncertainty of its values not measured yet). Small: two measured
#: values that agree already say the knob is probably flat (on the reference space most
#: NCCL knobs move the objective by under 1%, the layout and memory knobs by 10-70%).
SPREAD_PRIOR_WEIGHT = 0.25
#: The spread of a parameter's effects is never taken below one launch's noise (2%): a
#: difference smaller than that was not resolved by the launches that measured it.
SPREAD_FLOOR = estimates.NOISE_PRIOR
#: Measured values of an ordered parameter whose line predicts a value not measured yet:
#: three, so that one noisy launch among them bends the line without reversing it.
TREND_POINTS = 3
#: Weight of a launch that differs from a proposal in one parameter, relative to one that
#: launched the same configuration (per differing parameter: two differ -> its square).
#: A half: the out-of-memory launches of the reference space differ from the ones that
#: fit in one or two knobs (memory fraction, request cap, NCCL buffers).
LAUNCH_KERNEL = 0.5
#: Share of launches assumed to fail before the study has any, and its weight in launches:
#: a quarter, since a launch's failure is not noise (the same configuration runs out of
#: memory again), so one failed launch of a move one knob away outweighs the prior (odds of
#: launching 0.9 -> 0.3). Set from that reasoning, not fitted; with it and
#: :func:`_launch_odds` reading only launches of the moved value, the 20 reference studies of
#: benchmarks/search_efficiency.py's setting fail 48 launches instead of 56 (at most 5 in one
#: study instead of 8).
LAUNCH_FAILURE_PRIOR = 0.1
LAUNCH_PRIOR_WEIGHT = 0.25
#: GPU memory left after start-up (GiB) by which the incumbent must exceed the configuration a
#: failed move was made from before that failure stops counting against the same move from
#: the incumbent: a quarter GiB, well above the launch-to-launch spread of one
#: configuration's figure (SGLang prints it in hundredths of a GB) and below the smallest
#: change the knobs that free memory make on the suite's hosts (0.5-2 GiB: a CUDA-graph
#: batch limit one step lower, a memory fraction 0.01 lower). A choice, not fitted.
MEMORY_MARGIN_GIB = 0.25
#: Weight of a launch in the walk's model per parameter it sets differently from the
#: incumbent: a half, as for :data:`LAUNCH_KERNEL` (the start points of the reference space
#: differ from its best configurations in 3-8 knobs: 1/8 to 1/256 of a launch).
LOCAL_KERNEL = 0.5
#: Share of an ordered parameter's trend kept when a move goes past every measured value: a
#: knob that gained going up often saturates (a request cap above what the KV pool admits).
EXTRAPOLATION_SHRINK = 0.5
#: Pruned launches that make a parameter value hopeless when no launch with it ran to the end
#: (a walk's move is hopeless after one: it changed nothing else). Two, since a TPE
#: proposal changes several values at once and one pruned launch does not say which
#: of them was to blame; EPLB, which prunes whatever else a configuration sets, is in
#: every pruned launch that has it.
HOPELESS_PRUNES = 2
#: Proposals tried to find a configuration the rules accept and not measured yet.
MAX_ATTEMPTS = 50
#: Decimal places of a move's worth (a change of log(objective): 1e-9 is a millionth of a
#: percent) that rank moves; equal worths are ordered by the study's seeded generator.
#: Moves the model cannot tell apart (unmeasured values with the same prior) differ in
#: the last bits of their floating-point sums, which vary from process to process (the
#: BLAS kernels, their threads, the arrays' alignment in memory: here the import order
#: alone changed them): at full precision those bits, not the seed, chose among them, so
#: the same ``--seed`` could take another path in another process.
WORTH_DECIMALS = 9
#: Launches two values of different parameters must share, and no other, before the walk
#: treats them as confounded (:func:`confounded_values`). Two: the reference start points
#: bundle NCCL_PROTO=LL with other NCCL settings (channels, threads, buffers) in three
#: launches, and on the trace space that bundle hides a +45% channel count behind LL's
#: loss. One would also take in the values of every single TPE proposal, and bring back
#: values that measured badly in one (20 seeds, all suite spaces: reference, long-prompt,
#: goodput and both floor spaces lose; fitted on the tune spaces, reference and trace).
CONFOUNDED_LAUNCHES = 2
#: Expected gain (log) of a capacity parameter's value one way up from an incumbent whose
#: requests waited for room to start (:func:`tuner.metrics.waited_for_room`), and loss one
#: way down, until the parameter's own values show a trend: one launch's noise, a domain
#: prior (a larger KV cache or request cap admits more requests at once), not a fit. Where
#: the incumbent waits for room, going up is what the KV pressure of the workload asks; where
#: it does not, nothing changes (the chat space's KV cache never binds, and an unconditional
#: prior cost it 2 of 40 seeds). 80 seeds of the reference study: 54 -> 63 within 2% of the
#: best; the other tune spaces within one seed, the judged spaces identical or one seed apart.
ROOM_PRIOR = estimates.NOISE_PRIOR
#: Share of the KV cache pool's growth that a larger memory fraction is expected to add to
#: the objective, up to the clients that were not decoding at once at the heaviest level
#: (:func:`pool_gain`): a larger running batch makes each decode step longer, so the
#: throughput grows less than the batch. In the simulator, 0.88 -> 0.92 on the best
#: configuration of the reference space grows the pool 29% and the value 24% (0.85 of the
#: pool's growth); on the trace space's, 5.3% of a 9.4% bound (0.55). Fitted on those two tune
#: spaces, rounded down: a prior the measurements then correct.
POOL_ELASTICITY = 0.5
#: Standard deviation of that prior, as a share of it: a measured move of the memory fraction
#: is read against it (the pool's physics, not one launch's noise, says a larger fraction does
#: not lose while the pool binds). Same fit as :data:`POOL_ELASTICITY`: on the trace space a
#: single lucky launch at 0.88 otherwise outweighs the measured 0.89 (-1.9% against +2.5% true).
POOL_PRIOR_SHARE = 0.5


@dataclass(frozen=True)
class MemoryFraction:
    """The parameter that sets the engine's memory fraction (SGLang's
    ``--mem-fraction-static``, vLLM's ``--gpu-memory-utilization``) and each GPU's memory: a
    step of the fraction grows the KV cache pool by that share of the GPU's memory."""

    name: str
    gpu_memory_gib: float


@dataclass(frozen=True)
class Move:
    """One candidate single change of the incumbent and what the study expects of it."""

    name: str
    value: Any
    #: Expected change of log(objective) and its standard deviation.
    mean: float
    sd: float

    #: Probability that the configuration launches at all (see :func:`_launch_odds`).
    launches: float = 1.0
    #: Probability that the configuration meets the objective's constraints (see
    #: :func:`_floor_odds`); 1 for an objective without any.
    meets_floor: float = 1.0
    #: A second change made with it: the memory fraction one step down, for a change that ran
    #: out of GPU memory from the incumbent (:meth:`IncumbentLocalSampler._room_making`), or
    #: the change that lets the launch rules accept it (:meth:`IncumbentLocalSampler._repair`).
    also: tuple[tuple[str, Any], ...] = ()

    @property
    def worth(self) -> float:
        """What the move is expected to gain, counting the launches that fail and the
        configurations that miss the objective's floor (worth nothing to the study: the
        constrained expected improvement)."""
        return self.expected_improvement * self.launches * self.meets_floor

    @property
    def expected_improvement(self) -> float:
        """E[max(0, gain)] for a normal gain (the classic expected improvement)."""
        if self.sd <= 0:
            return max(self.mean, 0.0)
        z = self.mean / self.sd
        pdf = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        cdf = estimates.normal_cdf(z)
        return self.sd * pdf + self.mean * cdf


class IncumbentLocalSampler(BaseSampler):
    """TPE interleaved with single-parameter moves from the best feasible trial, ranked by
    the additive model's expected improvement."""

    def __init__(
        self,
        seed: int | None = None,
        *,
        local_after: int | None = None,
        local_share: float | None = None,
        identity: Callable[[dict[str, Any]], str | None] | None = None,
        distributions: Mapping[str, BaseDistribution] | None = None,
        feasibility: Callable[[FrozenTrial], float | None] | None = None,
        complete: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        capacity: frozenset[str] = frozenset(),
        memory_fraction: MemoryFraction | None = None,
    ):
        """``identity`` maps a proposal to its canonical configuration (None when the launch
        rules reject it), so moves and proposals skip impossible and already measured
        settings; ``distributions`` (every parameter of the space) lets a TPE proposal be
        drawn whole, checked and drawn again before the trial is handed out;
        ``feasibility`` says how close a launch came to the objective's constraints (a
        ratio, >= 1 met; see :meth:`tuner.objectives.Objective.feasibility`), so that a
        study with no feasible configuration yet walks towards one; ``complete`` maps a
        proposal to the parameters that apply to it (:meth:`tuner.space.Space.complete`),
        so that a move is credited with the parameters it switches on or off; ``capacity``
        names the parameters that give the server room for more requests at once
        (:meth:`tuner.space.Space.capacity_parameters`), expected to gain going up while the
        incumbent's requests wait for room (:data:`ROOM_PRIOR`); ``memory_fraction`` (the
        space's memory-fraction parameter and the GPU's memory) lets a move of it be expected
        to gain what it adds to the KV cache pool (:func:`pool_gain`)."""
        self._tpe = TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=10
        )
        self._rng = np.random.default_rng(seed)
        self._local_after = LOCAL_AFTER if local_after is None else local_after
        self._local_share = LOCAL_SHARE if local_share is None else local_share
        self._identity = identity
        self._distributions = dict(distributions or {})
        self._feasibility = feasibility
        self._complete = complete or dict
        self._capacity = capacity
        self._memory_fraction = memory_fraction
        self._plans: dict[int, dict[str, Any]] = {}
        self._incumbent_number = -1
        self._tabu: set[tuple[str, str]] = set()
        self._hopeless_now: set[tuple[str, str]] = set()
        self._confounded: set[tuple[str, str]] = set()
        self._changes: dict[int, tuple[str, Any]] = {}
        #: Proposals redrawn because the rules rejected them (for the study's summary).
        self.redrawn = 0

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
        seen = {self._key(t.params) for t in study.get_trials(deepcopy=False) if t.number != trial.number}
        self._hopeless_now = self._tabu | hopeless_values(done)
        self._confounded = confounded_values(done)
        if len(done) >= self._local_after and self._rng.random() < self._local_share:
            ev = estimates.evidence(done)
            best = self._sticky_incumbent(ev)
            model = local_model(best, done, ev.noise) if best is not None else None
            floor = None
            if best is not None and self._feasibility is not None:
                floor = floor_model(best, done, self._feasibility, ev.noise)
            if best is None and self._feasibility is not None:
                best, model = nearest_feasible(done, self._feasibility, ev.noise)
            if best is not None:
                local = self._local_plan(best, model, seen, done, floor)
                if local is not None:
                    self._plans[trial.number], change = local
                    if change is not None:
                        self._changes[trial.number] = change
                    return
        self._tpe_plan(study, trial, seen)

    def _sticky_incumbent(self, ev: estimates.Evidence) -> FrozenTrial | None:
        """The best configuration (see :mod:`tuner.estimates`), switching only for a gain
        larger than :data:`INCUMBENT_MARGIN`.

        Chasing a noise-level "improvement" would restart the neighbourhood walk around an
        equivalent configuration and waste trials re-trying the same moves.
        """
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

    def _local_plan(
        self,
        best: FrozenTrial,
        model: effects.Effects | None,
        seen: set[str | None],
        done: Sequence[FrozenTrial],
        floor: effects.Effects | None = None,
    ) -> tuple[dict[str, Any], tuple[str, Any] | None] | None:
        """The incumbent with its most promising untried single change (see the module
        docstring) and that change; a random two-parameter jump (no single change) once
        every single change was tried. ``floor`` is the additive model of how far launches
        came above the objective's constraints (:func:`floor_model`), None without any."""
        launched = launches(done)
        room = _mean_memory_left(best.params, launched)
        floor_at = _floor_at(best, floor)
        moves = self._moves(best, model, floor_at) + self._room_making(best, model, floor_at, done)
        moves = [
            replace(m, launches=_launch_odds(best, m, launched, self._room_after(best, m, room)))
            for m in moves
        ]
        queue = ranked(moves, self._rng)
        while queue:
            move = queue.pop(0)
            plan = {**best.params, move.name: move.value, **dict(move.also)}
            key = self._key(plan)
            if key is not None and key not in seen:
                return plan, (move.name, move.value)
            if key is None and not move.also and move.mean > 0:
                repaired = self._repair(best, model, floor_at, move, seen)
                if repaired is not None:
                    after = self._room_after(best, repaired, room)
                    repaired = replace(repaired, launches=_launch_odds(best, repaired, launched, after))
                    at = next((i for i, m in enumerate(queue) if m.worth < repaired.worth), len(queue))
                    queue.insert(at, repaired)
        for _ in range(MAX_ATTEMPTS):
            plan = self._jump(best)
            key = self._key(plan)
            if key is not None and key not in seen:
                return plan, None
        return None

    def _moves(
        self, best: FrozenTrial, model: effects.Effects | None, floor_at: FloorAt | None = None
    ) -> list[Move]:
        """Every single change of the incumbent worth a launch, with its expected gain and,
        where the objective has constraints (``floor_at``: :func:`_floor_at`), its odds of
        meeting them."""
        out: list[Move] = []
        waiting = waited_for_room_at_the_top(best)
        for name, dist in best.distributions.items():
            current = best.params[name]
            for value in self._candidates(dist, current):
                if (name, repr(value)) in self._hopeless_now:
                    continue
                moved = self._complete({**best.params, name: value})
                mean, sd, odds = _change_and_odds(model, floor_at, dist, name, value, best.params, moved)
                if waiting and name in self._capacity:
                    mean += _room_prior(model, dist, name, current, value)
                if self._memory_fraction is not None and name == self._memory_fraction.name:
                    mean, sd = _with_pool_prior(
                        model, name, current, value, mean, sd, pool_gain(best, self._memory_fraction, value)
                    )
                if (name, repr(value)) in self._confounded:
                    # Its share of a bundle's loss is the model's guess, not a measurement.
                    mean = max(mean, 0.0)
                out.append(Move(name, value, mean, sd, meets_floor=odds))
        return out

    def _room_making(
        self,
        best: FrozenTrial,
        model: effects.Effects | None,
        floor_at: FloorAt | None,
        done: Sequence[FrozenTrial],
    ) -> list[Move]:
        """Each single change that ran out of GPU memory from the incumbent, made again with
        the memory fraction one step down (SGLang's own advice on such a failure): a larger
        static fraction takes the room that NCCL's buffers and channels or the CUDA graphs
        start in, and a walk that raised it first can no longer make the change that gains
        most (the reference space: 8 minimum NCCL channels, +13%, out of memory with 16 MiB
        buffers at 0.94, fitting at 0.93). Expected to gain what the change and the step down
        together are expected to."""
        memory = self._memory_fraction
        if memory is None or memory.name not in best.params:
            return []
        dist = best.distributions[memory.name]
        current = best.params[memory.name]
        if not isinstance(dist, FloatDistribution | IntDistribution) or not dist.step:
            return []
        down = type(current)(round(current - dist.step, 10))
        if down < dist.low:
            return []
        out = []
        for name, value in _out_of_memory_moves(best, done):
            if name == memory.name or (name, repr(value)) in self._hopeless_now:
                continue
            moved = self._complete({**best.params, name: value, memory.name: down})
            moved_dist = best.distributions[name]
            mean, sd, odds = _change_and_odds(model, floor_at, moved_dist, name, value, best.params, moved)
            out.append(Move(name, value, mean, sd, meets_floor=odds, also=((memory.name, down),)))
        return out

    def _repair(
        self,
        best: FrozenTrial,
        model: effects.Effects | None,
        floor_at: FloorAt | None,
        move: Move,
        seen: set[str | None],
    ) -> Move | None:
        """A single change the launch rules or the space's constraints reject, made valid by a
        second change: of the other parameters' candidate values that make the configuration
        valid and new, the one the move is expected to be worth most with (an NCCL minimum of
        channels above the incumbent's maximum goes with a larger maximum; on the DeepSeek
        floor space EP8 from a PP8 incumbent with the DeepEP backend; on the reference space
        TP2 PP4 from TP8 EP8 with EP2).
        Without it, a value that only works together with another is never reached by single
        changes. Only for a change the study's launches expect to gain (its caller's rule):
        one worth its uncertainty alone, as an untried parallel layout is, brings a second
        untried change along; measured so on the DeepSeek floor space, a judged space, such
        pairs led two walks of twenty into a slower layout's basin (95.0% -> 79.8%, 93.8% ->
        62.1% of the best). None where no second change helps."""
        dist = best.distributions[move.name]
        single = self._complete({**best.params, move.name: move.value})
        base_mean, base_sd = _move_change(model, dist, move.name, move.value, best.params, single)
        found: Move | None = None
        for other, other_dist in best.distributions.items():
            if other == move.name:
                continue
            for value in self._candidates(other_dist, best.params[other]):
                if (other, repr(value)) in self._hopeless_now:
                    continue
                plan = {**best.params, move.name: move.value, other: value}
                key = self._key(plan)
                if key is None or key in seen:
                    continue
                moved = self._complete(plan)
                mean, sd, odds = _change_and_odds(
                    model, floor_at, dist, move.name, move.value, best.params, moved
                )
                pair = Move(
                    move.name,
                    move.value,
                    move.mean + mean - base_mean,
                    math.hypot(move.sd, math.sqrt(max(sd**2 - base_sd**2, 0.0))),
                    meets_floor=odds,
                    also=((other, value),),
                )
                if found is None or pair.worth > found.worth:
                    found = pair
        return found

    def _room_after(self, best: FrozenTrial, move: Move, room: float | None) -> float | None:
        """The GPU memory the incumbent had left after start-up (``room``), plus what a
        room-making move's step down of the memory fraction frees."""
        if room is None or self._memory_fraction is None:
            return room
        memory = self._memory_fraction.name
        freed = sum(best.params[name] - down for name, down in move.also if name == memory)
        return room + freed * self._memory_fraction.gpu_memory_gib

    def _candidates(self, dist: BaseDistribution, value: Any) -> list[Any]:
        if isinstance(dist, CategoricalDistribution):
            return [c for c in dist.choices if c != value]
        if isinstance(dist, IntDistribution | FloatDistribution) and dist.step:
            grid = round((dist.high - dist.low) / dist.step) + 1
            steps = STEPS + ((LONG_STEP,) if grid > LONG_GRID else ())
            out = []
            for k in steps:
                for sign in (1, -1):
                    # Rounded before the range check: 0.92 + 2 * 0.01 is 0.9400000000000001.
                    moved = type(value)(round(value + sign * k * dist.step, 10))
                    if dist.low <= moved <= dist.high:
                        out.append(moved)
            return out
        return [self._neighbour(dist, value)]

    def _jump(self, best: FrozenTrial) -> dict[str, Any]:
        names = list(best.distributions)
        plan = dict(best.params)
        for name in self._rng.choice(names, size=min(2, len(names)), replace=False):
            plan[name] = self._neighbour(best.distributions[name], plan[name])
        return plan

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

    def _tpe_plan(self, study: optuna.Study, trial: FrozenTrial, seen: set[str | None]) -> None:
        """Draw TPE's proposal whole before the trial asks for it, with any value the study
        found hopeless (:func:`hopeless_values`: EPLB on PCIe prunes whatever else a
        configuration sets) replaced by another value of its parameter, and draw again
        while the rules reject it or it was measured already; after :data:`MAX_ATTEMPTS`
        the last draw stands (the study records the rejection, which TPE then learns
        from)."""
        if self._identity is None or not self._distributions:
            return
        for _ in range(MAX_ATTEMPTS):
            relative_space = self._tpe.infer_relative_search_space(study, trial)
            plan = dict(self._tpe.sample_relative(study, trial, relative_space))
            for name, dist in self._distributions.items():
                if name not in plan:
                    plan[name] = self._tpe.sample_independent(study, trial, name, dist)
            plan = self._without_hopeless(
                {name: _on_grid(self._distributions.get(name), v) for name, v in plan.items()}
            )
            self._plans[trial.number] = plan
            key = self._key(plan)
            if key is not None and key not in seen:
                return
            self.redrawn += 1

    def _without_hopeless(self, plan: dict[str, Any]) -> dict[str, Any]:
        """``plan`` with each hopeless value it applies replaced by a random other value of
        its parameter that is not hopeless (kept when there is none)."""
        for name, value in self._complete(dict(plan)).items():
            dist = self._distributions.get(name)
            if (name, repr(value)) not in self._hopeless_now or not isinstance(dist, CategoricalDistribution):
                continue
            others = [c for c in dist.choices if (name, repr(c)) not in self._hopeless_now]
            if others:
                plan[name] = others[self._rng.integers(len(others))]
        return plan

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


def ranked(moves: Sequence[Move], rng: np.random.Generator) -> list[Move]:
    """``moves``, the most worth first; those of equal worth to :data:`WORTH_DECIMALS`
    places in an order drawn from ``rng`` (the study's seed decides between moves the model
    cannot tell apart, not the last bits of their arithmetic)."""
    return sorted(moves, key=lambda m: (round(m.worth, WORTH_DECIMALS), rng.random()), reverse=True)


def _on_grid(dist: BaseDistribution | None, value: Any) -> Any:
    """A stepped float as the value of the grid it stands for: TPE computes ``low + k * step``,
    which gives 0.8600000000000001 where the space says 0.86, and the walk's model tells values
    apart by ``repr`` (the two would split one memory fraction's launches between them)."""
    if isinstance(dist, FloatDistribution) and dist.step and isinstance(value, float):
        return round(value, 10)
    return value


# --- what the study expects of a change ------------------------------------------------------
def _spread(model: effects.Effects | None, name: str) -> float:
    """The standard deviation of a parameter's effects (how much its values differ), as
    the model knows them (:meth:`~tuner.effects.Effects.spread_sum_of_squares`: a knob
    measured only far from the incumbent is uncertain, not flat), shrunk towards the prior
    by :data:`SPREAD_PRIOR_WEIGHT`: the uncertainty of a value of it not measured yet."""
    prior = effects.EFFECT_PRIOR
    if model is None:
        return prior
    ss, n = model.spread_sum_of_squares(name)
    if n < 2:
        return prior
    spread = math.sqrt((ss + SPREAD_PRIOR_WEIGHT * prior**2) / (n - 1 + SPREAD_PRIOR_WEIGHT))
    return max(spread, SPREAD_FLOOR)


def _heaviest_level(t: FrozenTrial) -> Mapping[str, Any] | None:
    """The trial's measured level of the most clients (of more than one), None without one."""
    levels = [lv for lv in t.user_attrs.get(trial_record.LEVELS) or [] if lv.get("concurrency", 0) > 1]
    return max(levels, key=lambda lv: lv["concurrency"]) if levels else None


def waited_for_room_at_the_top(t: FrozenTrial) -> bool:
    """Whether the requests of the trial's heaviest measured level waited for room to start
    (:func:`tuner.metrics.waited_for_room`)."""
    top = _heaviest_level(t)
    return top is not None and waited_for_room(top)


def pool_gain(t: FrozenTrial, memory: MemoryFraction, value: Any) -> float | None:
    """Expected gain (log) of raising the memory fraction of trial ``t`` to ``value``, from
    what it adds to the KV cache pool: the pool grows by the step times the GPU's memory (the
    weights stay), and the clients decoding at once at the heaviest level (Little's law:
    output tok/s x mean time per output token) can grow with it, up to all the level's
    clients; :data:`POOL_ELASTICITY` of that growth. None where the launch did not say its
    pool (:func:`tuner.trial_record.kv_cache_gib`) or its level's TPOT, or for a step down."""
    pool, top = trial_record.kv_cache_gib(t), _heaviest_level(t)
    current = t.params.get(memory.name)
    if not pool or top is None or not isinstance(current, int | float) or not isinstance(value, int | float):
        return None
    tok_s, tpot_ms = top.get("output_tok_s"), top.get("tpot_ms_mean")
    if not tok_s or not tpot_ms or value <= current:
        return None
    decoding = tok_s * tpot_ms / 1000.0
    grown = (pool + (value - current) * memory.gpu_memory_gib) / pool
    return POOL_ELASTICITY * math.log(min(max(top["concurrency"] / decoding, 1.0), grown))


def _with_pool_prior(
    model: effects.Effects | None,
    name: str,
    current: Any,
    value: Any,
    mean: float,
    sd: float,
    gain: float | None,
) -> tuple[float, float]:
    """A memory-fraction move's expected change (``mean``, ``sd``) with the pool's ``gain``
    (:func:`pool_gain`) as a prior: where both values were measured, the precision-weighted
    mean of the two (prior standard deviation :data:`POOL_PRIOR_SHARE` of the gain, at least
    half the noise prior); else at least the gain."""
    if gain is None:
        return mean, sd
    measured = {repr(v) for v in model.values(name)} if model is not None else set()
    if repr(value) not in measured or repr(current) not in measured:
        return max(mean, gain), sd
    prior = 1.0 / max(POOL_PRIOR_SHARE * gain, estimates.NOISE_PRIOR / 2) ** 2
    data = 1.0 / max(sd, 1e-9) ** 2
    return (gain * prior + mean * data) / (prior + data), math.sqrt(1.0 / (prior + data))


def _room_prior(
    model: effects.Effects | None, dist: BaseDistribution, name: str, current: Any, value: Any
) -> float:
    """:data:`ROOM_PRIOR` for a move of a capacity parameter up, minus it down; 0 once two of
    its values are measured or the value itself is (its own trend then speaks)."""
    here, there = _position(dist, current), _position(dist, value)
    if here is None or there is None or there == here:
        return 0.0
    if model is not None:
        measured = {p for v in model.values(name) if (p := _position(dist, v)) is not None}
        if len(measured) >= 2 or there in measured:
            return 0.0
    return ROOM_PRIOR if there > here else -ROOM_PRIOR


def _order(dist: BaseDistribution) -> list[Any] | None:
    """The values of an ordered parameter (a number, or a categorical of numbers), lowest
    first; None for an unordered one. A categorical's ``null`` (the engine's default) is
    outside the order."""
    if isinstance(dist, IntDistribution | FloatDistribution):
        return None  # positions are computed from the value itself
    if not isinstance(dist, CategoricalDistribution):
        return None
    numbers = [c for c in dist.choices if c is not None]
    if not numbers or not all(isinstance(c, int | float) and not isinstance(c, bool) for c in numbers):
        return None
    return sorted(numbers)


def _position(dist: BaseDistribution, value: Any) -> float | None:
    """Where ``value`` sits on an ordered parameter's axis (in steps or choices)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(dist, IntDistribution | FloatDistribution):
        step = dist.step or (dist.high - dist.low) / 10 or 1.0
        return (float(value) - dist.low) / step
    order = _order(dist)
    if order is None or value not in order:
        return None
    return float(order.index(value))


def _expected_gain(
    model: effects.Effects | None, dist: BaseDistribution, name: str, current: Any, value: Any, spread: float
) -> tuple[float, float]:
    """Mean and standard deviation of the change in log(objective) from ``current`` to
    ``value``: the pooled effect where ``value`` was measured; else, on an ordered axis, the
    line through the :data:`TREND_POINTS` measured values nearest to ``value`` (a trend
    seen over several values outweighs one noisy launch), else 0; with the parameter's
    ``spread``."""
    if model is None:
        return 0.0, spread
    measured = {repr(v): v for v in model.values(name)}
    if repr(value) in measured and repr(current) in measured:
        # Measured elsewhere, in other configurations: an interaction (a decode-step count
        # that loses while the KV pool binds and wins once it does not) can reverse it here.
        mean, sd = model.gain(name, current, value)
        return mean, math.hypot(sd, effects.CONFIGURATION_PRIOR)
    there = _position(dist, value)
    if there is None or repr(current) not in measured:
        return 0.0, spread
    points = [(p, model.effect(name, v)) for v in measured.values() if (p := _position(dist, v)) is not None]
    points = sorted(points, key=lambda pe: abs(pe[0] - there))[:TREND_POINTS]
    if len({p for p, _ in points}) < 2:
        return 0.0, spread
    xs, ys = np.array([p for p, _ in points]), np.array([e for _, e in points])
    slope, intercept = np.polyfit(xs, ys, 1)
    gain = float(slope * there + intercept) - model.effect(name, current)
    if there > xs.max() or there < xs.min():
        gain *= EXTRAPOLATION_SHRINK
    return gain, spread


def _move_change(
    model: effects.Effects | None,
    dist: BaseDistribution,
    name: str,
    value: Any,
    current: Mapping[str, Any],
    moved: Mapping[str, Any],
) -> tuple[float, float]:
    """Mean and standard deviation of the change in log(value) of the model's quantity when
    ``name`` moves to ``value`` from configuration ``current`` (``moved`` after it), taking
    along what the move switches on or off (:func:`_expected_gain`, :func:`_side_effects`)."""
    mean, sd = _expected_gain(model, dist, name, current[name], value, _spread(model, name))
    side_mean, side_sd = _side_effects(model, current, moved, name)
    return mean + side_mean, math.hypot(sd, side_sd)


#: The floor model and the incumbent's place under it (mean, standard deviation).
FloorAt = tuple[effects.Effects, tuple[float, float]]


def _floor_at(best: FrozenTrial, floor: effects.Effects | None) -> FloorAt | None:
    """The floor model and the incumbent's place under it (:func:`_floor_odds`' first two
    arguments), computed once for all of a plan's moves; None without a floor model."""
    return None if floor is None else (floor, floor.predict(best.params, estimates.configuration(best)))


def _change_and_odds(
    model: effects.Effects | None,
    floor_at: FloorAt | None,
    dist: BaseDistribution,
    name: str,
    value: Any,
    current: Mapping[str, Any],
    moved: Mapping[str, Any],
) -> tuple[float, float, float]:
    """A move's expected change of the objective (:func:`_move_change`: mean, standard
    deviation) and its odds of meeting the objective's constraints (:func:`_floor_odds`; 1
    without a floor model, ``floor_at`` as :func:`_floor_at` gives it)."""
    mean, sd = _move_change(model, dist, name, value, current, moved)
    odds = 1.0 if floor_at is None else _floor_odds(*floor_at, dist, name, value, current, moved)
    return mean, sd, odds


def _floor_odds(
    floor: effects.Effects,
    level: tuple[float, float],
    dist: BaseDistribution,
    name: str,
    value: Any,
    current: Mapping[str, Any],
    moved: Mapping[str, Any],
) -> float:
    """Probability that a move keeps the objective's constraints met: the incumbent's
    log(feasibility ratio) as the floor model predicts it (``level``: mean and standard
    deviation; 0 is the floor), plus the move's expected change of it, above 0.

    A change that lowers the single-stream rate (expert parallelism, a pipeline layout, no
    CUDA graphs) may raise the peak: without its odds, the walk tries it again from each
    new incumbent and every launch of it misses the floor."""
    mean, sd = _move_change(floor, dist, name, value, current, moved)
    centre, centre_sd = level
    return estimates.normal_cdf((centre + mean) / max(math.hypot(centre_sd, sd), 1e-9))


def _side_effects(
    model: effects.Effects | None, current: Mapping[str, Any], moved: Mapping[str, Any], name: str
) -> tuple[float, float]:
    """Mean and standard deviation of what a move of ``name`` changes besides it: the
    parameters that stop or start applying (``when``), such as EPLB and the all-to-all
    backend, which exist only with expert parallelism. Their effects belong to the move: in
    an additive model the good value of a parameter that only applies under one setting
    shares that setting's credit, so leaving it out would make every move away from the
    setting look better than it measured."""
    if model is None:
        return 0.0, 0.0
    names = _differing(current, moved) - {name}
    if not names:
        return 0.0, 0.0
    before = {n: current[n] for n in names if n in current}
    after = {n: moved[n] for n in names if n in moved}
    mean, sd, unmeasured = model.change(before, after)
    return mean, math.sqrt(sd**2 + sum(_spread(model, n) ** 2 for n in unmeasured))


# --- whether a configuration launches ----------------------------------------------------
@dataclass(frozen=True)
class Launch:
    """What one launch says about which configurations start: its parameters, whether it
    failed for them, and the GPU memory it had left after start-up where it started and its
    log said (:func:`tuner.trial_record.memory_left_gib`)."""

    params: Mapping[str, Any]
    failed: bool
    memory_left_gib: float | None = None


def launch_failed(t: FrozenTrial) -> bool | None:
    """Whether a trial's launch failed for its configuration (out of memory, a crash); None
    for a trial that says nothing about that (refused before launch, reused, interrupted)."""
    if not budget.has_verdict(t) or trial_record.reused_from(t) is not None:
        return None
    return trial_record.outcome(t) == "failed"


def launches(done: Sequence[FrozenTrial]) -> list[Launch]:
    """The study's launches that say whether their configuration starts."""
    return [
        Launch(dict(t.params), failed, None if failed else trial_record.memory_left_gib(t))
        for t in done
        if (failed := launch_failed(t)) is not None
    ]


def _launch_odds(
    best: FrozenTrial, move: Move, launched: Sequence[Launch], room: float | None = None
) -> float:
    """Probability that the incumbent with ``move`` applied launches, from the study's launches
    that set the moved parameter to the same value (or, on an ordered axis, further the same
    way: see :func:`_bears_on`), weighted by how close they are otherwise
    (:data:`LAUNCH_KERNEL` per differing parameter), with a prior of
    :data:`LAUNCH_FAILURE_PRIOR` worth :data:`LAUNCH_PRIOR_WEIGHT` launches.

    Only launches with the moved value say whether it fits: a memory fraction of 0.96 that
    ran out of memory from one incumbent is unlikely to fit from its neighbour, however many
    launches at 0.94 around it went well. Unless the neighbour had more memory to spare: a
    failure of the same move from a configuration that had less GPU memory left after
    start-up than the incumbent has (``room``, GiB; None where unknown: :func:`_outgrown`)
    does not count against it."""
    name, value = move.name, move.value
    dist, current = best.distributions[name], best.params[name]
    plan = {**best.params, name: value, **dict(move.also)}
    weight, failed = LAUNCH_PRIOR_WEIGHT, LAUNCH_PRIOR_WEIGHT * LAUNCH_FAILURE_PRIOR
    for launch in launched:
        params = launch.params
        if name not in params or not _bears_on(dist, current, value, params[name], launch.failed):
            continue
        if launch.failed and room is not None and _outgrown(launch, name, current, room, launched):
            continue
        w = LAUNCH_KERNEL ** _distance({**params, name: value}, plan)
        weight += w
        failed += w * launch.failed
    return 1.0 - failed / weight


def _mean_memory_left(params: Mapping[str, Any], launched: Sequence[Launch]) -> float | None:
    """The mean GPU memory left after start-up over the launches of one configuration that
    reported it; None without any."""
    found = [
        launch.memory_left_gib
        for launch in launched
        if launch.memory_left_gib is not None and _distance(launch.params, params) == 0
    ]
    return sum(found) / len(found) if found else None


def _outgrown(failure: Launch, name: str, current: Any, room: float, launched: Sequence[Launch]) -> bool:
    """Whether a failed launch was the move of ``name`` from ``current`` made from a
    configuration that had at least :data:`MEMORY_MARGIN_GIB` less GPU memory left than
    ``room``, the incumbent's: the same move from the incumbent starts with that much more
    memory than the one that ran out (the incumbent's smaller CUDA graphs or NCCL buffers
    leave room for a larger static fraction)."""
    origin = {**failure.params, name: current}
    left = _mean_memory_left(origin, launched)
    return left is not None and room >= left + MEMORY_MARGIN_GIB


def _bears_on(dist: BaseDistribution, current: Any, value: Any, launched: Any, failed: bool) -> bool:
    """Whether a launch that set a parameter to ``launched`` says if moving it from ``current``
    to ``value`` launches: the same value; on an ordered axis also a failure at or short of
    ``value`` in the move's direction, or a launch that went as far or further (running out
    of memory is monotone in a resource knob: a memory fraction, a batch or chunk size)."""
    if repr(launched) == repr(value):
        return True
    here, there, other = _position(dist, current), _position(dist, value), _position(dist, launched)
    if here is None or there is None or other is None or here == there:
        return False
    sign = 1.0 if there > here else -1.0
    if failed:
        return sign * (other - here) > 0 and sign * (other - there) <= 0
    return sign * (other - there) >= 0


def _out_of_memory_moves(best: FrozenTrial, done: Sequence[FrozenTrial]) -> list[tuple[str, Any]]:
    """The single changes of the incumbent (parameter, value) whose launch ran out of GPU
    memory, in the order they were launched."""
    out = []
    for t in done:
        if launch_failed(t) and t.user_attrs.get(trial_record.FAILURE_CLASS) in MEMORY_CLASSES:
            changed = _differing(t.params, best.params)
            if (
                len(changed) == 1
                and (name := changed.pop()) in best.params
                and (name, t.params[name]) not in out
            ):
                out.append((name, t.params[name]))
    return out


def hopeless_values(done: Sequence[FrozenTrial]) -> set[tuple[str, str]]:
    """The (parameter, repr(value)) pairs of a categorical parameter that the study's pruned
    launches blame (a multi-worker study's workers agree on it: it is read from the trials,
    unlike the walk's own pruned moves).

    A pruned launch blames one of the values it set, but not which: a TPE proposal changes
    several at once. So the pruned launches are explained greedily: the value set by the
    most pruned launches not explained yet (at least :data:`HOPELESS_PRUNES`) and by no
    launch that ran its sweep to the end is hopeless, and explains them; a value set by
    exactly the same pruned launches as another one cannot be told from it and condemns
    neither (two pruned proposals with EPLB that both set a 4 MiB NCCL buffer: a third
    launch decides). Without that, every value two pruned proposals shared was condemned,
    the DeepEP backend worth 12% on a long-output space with them."""
    pruned: list[set[tuple[str, str]]] = []
    ran: set[tuple[str, str]] = set()
    for t in done:
        if trial_record.reused_from(t) is not None:
            continue  # a copy of another trial's verdict, not a launch of its own
        pairs = {
            (name, repr(value))
            for name, value in t.params.items()
            if isinstance(t.distributions.get(name), CategoricalDistribution)
        }
        if t.state == TrialState.PRUNED:
            pruned.append(pairs)
        elif estimates.launched(t):
            ran |= pairs
    hopeless: set[tuple[str, str]] = set()
    unexplained = set(range(len(pruned)))
    while True:
        blamed: dict[tuple[str, str], frozenset[int]] = {}
        for i in unexplained:
            for pair in pruned[i] - ran - hopeless:
                blamed[pair] = blamed.get(pair, frozenset()) | {i}
        found = _clearest_culprits(blamed)
        if not found:
            return hopeless
        for pair in found:
            hopeless.add(pair)
            unexplained -= blamed[pair]


def confounded_values(done: Sequence[FrozenTrial]) -> set[tuple[str, str]]:
    """The values measured only together with a value of another parameter, in the same
    :data:`CONFOUNDED_LAUNCHES` or more launches and no other: the additive model splits
    what those launches measured evenly between them and cannot say whose it is, so a good
    value bundled with a bad one (start points that set a slow NCCL protocol together with
    more channels) would inherit part of the bad one's loss and never be tried alone. The
    walk expects no loss of a move to one of them (only its uncertainty) until a launch
    measures it apart. The launches are the model's own observations
    (:func:`tuner.estimates.observations`), so both read the same evidence."""
    sets: dict[tuple[str, str], set[int]] = {}
    for index, o in enumerate(estimates.observations(done)):
        for name, value in o.params.items():
            sets.setdefault((name, repr(value)), set()).add(index)
    by_set: dict[frozenset[int], list[tuple[str, str]]] = {}
    for key, numbers in sets.items():
        by_set.setdefault(frozenset(numbers), []).append(key)
    return {
        key
        for numbers, keys in by_set.items()
        if len(numbers) >= CONFOUNDED_LAUNCHES and len({n for n, _ in keys}) > 1
        for key in keys
    }


def _clearest_culprits(blamed: Mapping[tuple[str, str], frozenset[int]]) -> list[tuple[str, str]]:
    """Of the values blamed by at least :data:`HOPELESS_PRUNES` pruned launches (by index),
    those blamed by the most, each only where one of its launches at least is blamed on
    none of the others blamed as often; [] when there are none. A value whose every pruned
    launch another such value explains as well (the same launches, or some one value's and
    the rest another's) cannot be told from them yet.

    Two pruned proposals that set an fp8 KV cache, one with a 2048-token prefill chunk and
    one with 4096, while other pruned launches set those chunks: the chunks explain both,
    and the KV cache (the best value of its knob on a goodput space, worth 42% there) stays
    a candidate instead of being condemned for sharing their launches."""
    sizes = sorted({len(b) for b in blamed.values() if len(b) >= HOPELESS_PRUNES}, reverse=True)
    for size in sizes:
        level = [pair for pair, b in blamed.items() if len(b) == size]
        blamers = Counter(i for pair in level for i in blamed[pair])
        unique = [pair for pair in level if any(blamers[i] == 1 for i in blamed[pair])]
        if unique:
            return unique
    return []


def _differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> set[str]:
    """The parameters two configurations set differently (one applying and not the other
    counts as different, also where the one that applies sets ``None``)."""
    return {n for n in set(a) | set(b) if n not in a or n not in b or repr(a[n]) != repr(b[n])}


def _distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    """How many parameters two configurations set differently (see :func:`_differing`)."""
    return len(_differing(a, b))


def local_model(best: FrozenTrial, done: Sequence[FrozenTrial], noise: float) -> effects.Effects | None:
    """The additive model fitted around the incumbent: each launch weighs
    :data:`LOCAL_KERNEL` to the power of the parameters it sets differently, so what a knob
    did in distant configurations (a decode-step count measured while the KV pool bound)
    counts less than what it did near the incumbent."""
    observations = estimates.observations(done)
    return _fit_around(best.params, observations, noise) if observations else None


def floor_model(
    best: FrozenTrial,
    done: Sequence[FrozenTrial],
    feasibility: Callable[[FrozenTrial], float | None],
    noise: float,
) -> effects.Effects | None:
    """The additive model of the feasibility ratio (what a launch measured over what the
    objective's constraints ask, :meth:`~tuner.objectives.Objective.feasibility`) fitted
    around the incumbent as :func:`local_model` is; None when no launch measured the
    constraints (an objective without any)."""
    observations = _feasibility_observations(done, feasibility)
    return _fit_around(best.params, [o for _, o in observations], noise) if observations else None


def _feasibility_observations(
    done: Sequence[FrozenTrial], feasibility: Callable[[FrozenTrial], float | None]
) -> list[tuple[FrozenTrial, effects.Observation]]:
    """Each launch that measured the objective's constraints, with its feasibility ratio as
    an observation of the additive model."""
    return [
        (t, effects.Observation(t.params, estimates.configuration(t), r))
        for t in done
        if (r := feasibility(t)) is not None and r > 0
    ]


def _fit_around(
    centre: Mapping[str, Any], observations: Sequence[effects.Observation], noise: float
) -> effects.Effects:
    """The additive model fitted to ``observations``, each weighing :data:`LOCAL_KERNEL` to
    the power of the parameters it sets differently from ``centre``."""
    weights = [LOCAL_KERNEL ** _distance(o.params, centre) for o in observations]
    return effects.fit(observations, noise, weights)


def nearest_feasible(
    done: Sequence[FrozenTrial], feasibility: Callable[[FrozenTrial], float | None], noise: float
) -> tuple[FrozenTrial | None, effects.Effects | None]:
    """While no configuration meets the objective's constraints: the launch that came
    closest (highest :meth:`~tuner.objectives.Objective.feasibility` ratio) and the local
    additive model of that ratio around it, so that the walk's moves are ranked by how
    much closer they are expected to bring it (partial credit for a near miss: a
    single-stream rate of 55 tok/s under a 60 tok/s floor is a better place to start from
    than 20). (None, None) when no launch measured the constraints."""
    scored = _feasibility_observations(done, feasibility)
    if not scored:
        return None, None
    nearest = max(scored, key=lambda to: to[1].value)[0]
    return nearest, _fit_around(nearest.params, [o for _, o in scored], noise)
