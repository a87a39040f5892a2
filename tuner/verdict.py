"""How sure a study is of its winner: the estimate with an interval, the launches it rests
on, the runner-up and the gap, and what a user of the winning level experiences.

Two configurations 0.2% apart on one launch each under ~2% run-to-run noise are not told
apart; saying so is part of the answer. The interval is the estimate plus and minus
:data:`tuner.estimates.CONFIDENCE_Z` standard errors of the study's noise model
(:func:`tuner.estimates.evidence`), the same bounds the study ranks configurations by.
``tuner best``, the search summary and the report print this one verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from tuner import estimates, trial_record
from tuner.estimates import CONFIDENCE_Z, FLOOR_CONFIDENCE, FLOOR_SE
from tuner.metrics import waited_for_room
from tuner.trial_record import TrialRecord
from tuner.wording import changes, changes_text


@dataclass(frozen=True)
class Verdict:
    """The winner of a study and how sure that is."""

    winner: TrialRecord
    estimate: float
    low: float
    high: float
    #: Relative run-to-run standard deviation of one launch (the study's noise model).
    noise: float
    runner_up: TrialRecord | None = None
    runner_up_estimate: float | None = None
    #: Whether the runner-up's interval reaches the winner's: the two are not told apart.
    within_noise: bool = False
    #: Launches above the winner flagged as outliers and not re-measured yet: (trial,
    #: value). They cannot win until their re-measurement agrees with them.
    pending: tuple[tuple[int, float], ...] = ()
    #: Probability that the winner meets the objective's single-stream floor on the host
    #: (:func:`tuner.estimates.floor_odds`); None for an objective without a floor.
    floor_odds: float | None = None

    @property
    def launches(self) -> int:
        return len(self.winner.runs)

    @property
    def launches_text(self) -> str:
        """ "1 launch", "3 launches"."""
        return f"{self.launches} launch" + ("es" if self.launches != 1 else "")

    @property
    def gap(self) -> float | None:
        """How far the runner-up's estimate is below the winner's, as a fraction."""
        if self.runner_up_estimate is None or not self.estimate:
            return None
        return 1.0 - self.runner_up_estimate / self.estimate

    @property
    def runner_up_changes(self) -> dict[str, tuple[Any, Any]]:
        """What the runner-up sets differently from the winner, ``{name: (winner's value,
        runner-up's)}``: where the two are within the noise, the settings the study could
        not decide between (more launches of each would tell them apart)."""
        if self.runner_up is None:
            return {}
        return changes(self.winner.params, self.runner_up.params)

    def winning_level(self) -> dict[str, Any] | None:
        """The measured level of the winner's peak (its highest tok/s)."""
        levels = [lv for lv in self.winner.levels if lv.get("output_tok_s") is not None]
        return max(levels, key=lambda lv: lv["output_tok_s"]) if levels else None

    def latency(self) -> dict[str, Any]:
        """What one user sees at the winning level: per-user tok/s, ITL p50, TTFT p99."""
        lv = self.winning_level()
        if lv is None:
            return {}
        per_user = lv.get("per_stream_tok_s")
        if per_user is None and lv.get("concurrency"):
            per_user = lv["output_tok_s"] / lv["concurrency"]
        return {
            "concurrency": lv.get("concurrency"),
            "per_user_tok_s": per_user,
            "itl_ms_p50": lv.get("itl_ms_p50"),
            "ttft_s_p99": lv.get("ttft_s_p99"),
        }

    def held_back(self) -> dict[str, Any] | None:
        """The winner's heaviest measured level whose requests waited for room to start
        (:func:`tuner.metrics.waited_for_room`): concurrency, TTFT median and p99, and wall
        time; None when no level shows it."""
        held = [lv for lv in self.winner.levels if waited_for_room(lv)]
        if not held:
            return None
        top = max(held, key=lambda lv: lv["concurrency"])
        out = {k: top[k] for k in ("concurrency", "ttft_s_p50", "ttft_s_p99", "wall_s")}
        out["request_cap"] = running_request_cap(self.winner.attrs.get(trial_record.SERVER_INFO) or {})
        return out

    def held_back_line(self) -> str | None:
        """What held the winner's requests back (:meth:`held_back`) and what admits them
        sooner. The server's own running-request cap tells the two limits apart: a cap at or
        above the level's concurrency held none of them back, so the KV cache did; one below
        it did (and the KV cache may as well)."""
        held = self.held_back()
        if held is None:
            return None
        c, cap = held["concurrency"], held["request_cap"]
        said = (
            f"at C={c}: requests waited for room to start (TTFT p99 {held['ttft_s_p99']:.1f} s "
            f"against a median of {held['ttft_s_p50']:.1f} s): "
        )
        if cap is None:
            return said + (
                "the KV cache or the running-request cap was full, so they started only as others "
                "finished; more memory for the KV cache, a higher request cap or fewer concurrent "
                "requests admits them sooner"
            )
        if cap >= c:
            return said + (
                f"the KV cache was full (the server's running-request cap, {cap}, is not below "
                f"C={c}), so they started only as others finished; more memory for the KV cache "
                "or fewer concurrent requests admits them sooner"
            )
        return said + (
            f"the server runs at most {cap} requests at once, fewer than C={c}, so the rest "
            "started only as others finished; a higher request cap (where the KV cache holds "
            "them) or fewer concurrent requests admits them sooner"
        )

    def lines(self, unit: str = "tok/s") -> list[str]:
        """The verdict in a few lines of plain text."""
        w = self.winner
        runs = ", ".join(f"#{n}" for n in w.runs)
        out = [
            f"estimate {self.estimate:.0f} {unit} (interval {self.low:.0f}..{self.high:.0f}, "
            f"+-{CONFIDENCE_Z:g} standard error at {self.noise * 100:.1f}% run-to-run noise); "
            f"rests on {self.launches_text} ({runs})"
        ]
        if self.runner_up is not None and self.gap is not None:
            verdict = (
                "within the noise: not told apart, either is a sound choice"
                if self.within_noise
                else "outside the noise"
            )
            differs = self.runner_up_changes
            out.append(
                f"runner-up: trial #{self.runner_up.number}, estimate {self.runner_up_estimate:.0f} {unit}, "
                f"{self.gap * 100:.1f}% below ({verdict})"
                + (f"; it differs in {changes_text(differs)}" if differs else "")
            )
        else:
            out.append("runner-up: none (one configuration measured)")
        for number, value in self.pending:
            out.append(
                f"trial #{number}: {value:.0f} {unit}, an outlier against the study's noise model: "
                "re-measuring (the study's next trial) before it can be recommended"
            )
        if (floor := self.floor_line()) is not None:
            out.append(floor)
        lat = self.latency()
        if lat:
            parts = [f"at C={lat['concurrency']}:"]
            if lat.get("per_user_tok_s") is not None:
                parts.append(f"{lat['per_user_tok_s']:.1f} tok/s per user")
            if lat.get("itl_ms_p50") is not None:
                parts.append(f"ITL p50 {lat['itl_ms_p50']:.0f} ms")
            if lat.get("ttft_s_p99") is not None:
                parts.append(f"TTFT p99 {lat['ttft_s_p99']:.2f} s")
            out.append(" ".join(parts[:1]) + " " + ", ".join(parts[1:]))
        if (held := self.held_back_line()) is not None:
            out.append(held)
        if (memory := self.memory_line()) is not None:
            out.append(memory)
        return out

    def floor_line(self) -> str | None:
        """How sure the study is that the winner meets the single-stream floor (None
        without a floor)."""
        if self.floor_odds is None:
            return None
        odds = self.floor_odds * 100
        said = f"single-stream floor: met with {odds:.1f}% confidence over {self.launches_text}"
        if self.floor_odds >= FLOOR_CONFIDENCE:
            return said
        return (
            f"{said}: no configuration clears it by {FLOOR_SE:g} standard errors; measure this one "
            "again (a larger --budget) or lower the floor before relying on it"
        )

    def memory_line(self) -> str | None:
        """How much GPU memory the winner's server had left once started, where its log said
        (:attr:`TrialRecord.memory_left_gib`): the room prefill runs in, and all that another
        process on the same GPUs may take before the unit's server runs out."""
        left, pool = self.winner.memory_left_gib, self.winner.kv_cache_gib
        if left is None:
            return None
        said = (
            f"GPU memory left after start-up: {left:.1f} GiB on the tightest GPU "
            f"(trial #{self.winner.number}): prefill runs in it, and another process on these GPUs "
            "must fit in it too"
        )
        return said if pool is None else f"{said}; its KV cache pool: {pool:.1f} GiB per GPU"

    def as_dict(self) -> dict[str, Any]:
        """The same facts for ``--format json``."""
        return {
            "estimate": self.estimate,
            "interval": [self.low, self.high],
            "interval_z": CONFIDENCE_Z,
            "noise": self.noise,
            "launches": self.launches,
            "runs": list(self.winner.runs),
            "runner_up": None
            if self.runner_up is None
            else {
                "trial": self.runner_up.number,
                "estimate": self.runner_up_estimate,
                "gap": self.gap,
                "within_noise": self.within_noise,
                "differs": {name: list(pair) for name, pair in self.runner_up_changes.items()},
            },
            "at_winning_level": self.latency(),
            "held_back": self.held_back(),
            "memory_left_gib": self.winner.memory_left_gib,
            "kv_cache_gib": self.winner.kv_cache_gib,
            "outliers_re_measuring": [{"trial": n, "value": v} for n, v in self.pending],
            "floor_odds": self.floor_odds,
        }


def verdict(study: optuna.Study) -> Verdict | None:
    """The study's winner (as :func:`tuner.estimates.best_record` picks it) and how sure that is;
    None when nothing feasible was measured."""
    trials = study.get_trials(deepcopy=False)
    ev = estimates.evidence(trials)
    lead = ev.recommended()
    if lead is None:
        return None
    others = [e for e in ev.estimates if e.key != lead.key]
    runner = estimates.leader(others, ev.noise) if others else None
    return Verdict(
        winner=estimates.record(lead, trials),
        estimate=lead.value,
        low=lead.score(ev.noise),
        high=lead.upper(ev.noise),
        noise=ev.noise,
        runner_up=estimates.record(runner, trials) if runner is not None else None,
        runner_up_estimate=runner.value if runner is not None else None,
        within_noise=runner is not None and runner.upper(ev.noise) >= lead.score(ev.noise),
        pending=tuple(
            (n, v)
            for e in ev.estimates
            if e.key != lead.key
            for n, v in zip(e.numbers, e.values, strict=True)
            if n in e.pending and v > lead.value
        ),
        floor_odds=lead.floor_odds if _has_floor(trials) else None,
    )


def running_request_cap(server_info: Mapping[str, Any]) -> int | None:
    """The most requests the server runs at once, as it reported it (``/server_info``): the
    scheduler's resolved value (``internal_states``, SGLang; it is below the flag where the
    KV pool holds fewer) before the launch argument; None when the server said neither."""
    states = server_info.get("internal_states")
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], Mapping) else {}
    for cap in (first.get("max_running_requests"), server_info.get("max_running_requests")):
        if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
            return cap
    return None


def _has_floor(trials: list[optuna.trial.FrozenTrial]) -> bool:
    """Whether the study's objective has a single-stream floor (its launches carry it)."""
    return any("min_single_stream" in t.constraints for t in trials)
