"""Live progress of ``tuner search``: one line per trial, and a status line on a terminal.

A real trial restarts the server (minutes) and sweeps several levels (minutes each), so
a search of 40 trials runs for hours; the person watching wants to know where it is
and how long is left without scrolling back. On a terminal, a status line at the
bottom is redrawn in place (``\\r`` and an ANSI clear) every second and at each event:
trial i of N, elapsed time, an estimate of the time left from the measured durations
of the trials finished in this run, the best so far, and the level the running trial
is at. Finished trials print a line that scrolls above it.

When the output is not a terminal (a pipe, a file, CI), only plain lines are written:
the per-trial lines and, at most every ``plain_interval_s`` seconds, a ``progress:``
line with the same facts as the status line. No ``\\r``, no escape sequences.

Every event is also logged through loguru (:mod:`tuner.logging`): trial lines at INFO,
levels at DEBUG, so ``--log-file`` keeps the whole story with timestamps.

Hooks (all safe to call from an Optuna callback: they never raise into the study):
``start(budget, already_finished)``, ``trial_started(number)``,
``level_done(number, level_index, metrics)``, ``trial_done(study, frozen_trial)``,
``close(*lines)``.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import optuna
from loguru import logger
from optuna.trial import FrozenTrial

from tuner import fidelity
from tuner import logging as tuner_logging
from tuner.estimates import best_record
from tuner.metrics import tok_s_text
from tuner.trial_record import TrialRecord
from tuner.wording import changes, changes_text, params_text, refusal_text

#: Carriage return plus "erase the whole line": redraws the status line in place.
CLEAR_LINE = "\r\x1b[2K"
#: Trial durations that feed the estimate of the time left (the most recent ones).
ETA_WINDOW = 10
#: Records of lines this module already prints to stdout: the log file keeps them, the
#: console sink skips them (see tuner.logging).
_shown_log = logger.bind(**{tuner_logging.SHOWN: True})


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` (``D days, H:MM:SS`` beyond a day): the form of the status line."""
    seconds = max(0, round(seconds))
    days, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    text = f"{h}:{m:02d}:{s:02d}"
    return f"{days} days, {text}" if days else text


def _differences(
    space: Any, params: Mapping[str, Any], other: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """``{name: (value in other, value in params)}`` for the parameters that differ: the
    space's notion of "differs" (a parameter that does not apply is unset; 0.88 and
    0.8800000001 are the same) when it can judge both, else a plain comparison."""
    if space is not None:
        try:
            return {k: (v[1], v[0]) for k, v in space.differences(params, other).items()}
        except Exception:  # parameters of an edited space: fall back to the stored values
            pass
    return changes(other, params)


def _same_configuration(rec: TrialRecord, other: TrialRecord) -> bool:
    return rec.config_key is not None and rec.config_key == other.config_key


def _state(rec: TrialRecord, engine: str | None) -> tuple[str, str]:
    """The trial's state in a word or three, and the full reason (shown last, never cut)."""
    if rec.outcome == "infeasible":
        return "refused, not launched", refusal_text(rec.reason, engine)
    if rec.outcome == "failed" and rec.backend == "sim" and rec.failure_class in ("invalid-args", "crash"):
        # The simulated server applies the engine's launch rules: its refusal is one of them.
        message = (rec.reason or "").removeprefix(f"{rec.failure_class}: ")
        return "refused", refusal_text(message, engine)
    if rec.outcome == "failed":
        return f"failed ({rec.failure_class or '?'})", rec.reason or ""
    if rec.outcome == "pruned":
        return rec.reason or "pruned", ""
    if rec.violations:
        return "missed a constraint", rec.reason or ""
    if rec.outcome == "reused":
        return f"reused #{rec.reused_from}", ""
    if rec.repeat_of is not None and rec.outcome == "complete":
        return f"repeat of #{rec.repeat_of}", ""
    if rec.model_pick is not None and rec.outcome == "complete":
        return f"model's pick from #{rec.model_pick}", ""
    return rec.outcome, ""


def best_change(
    rec: TrialRecord, best: TrialRecord | None, previous: TrialRecord | None, space: Any = None
) -> str:
    """What trial ``rec`` did to the best: ``new best: mem_fraction_static 0.88 -> 0.9``
    (the change from the previous best), or why the best estimate moved down; empty when
    the best did not change."""
    if best is None or best.mean is None:
        return ""
    if previous is None or previous.mean is None:
        return "first best" if best.number == rec.number else ""
    notes = []
    if best.number != previous.number and best.config_key == previous.config_key:
        # The same configuration, now shown by its first launch on the whole target workload.
        notes.append(f"best confirmed on the target workload: #{previous.number}'s configuration")
    elif best.number != previous.number and (best.number == rec.number or rec.number in best.runs):
        changed = _differences(space, best.params, previous.params)
        gain = (best.mean / previous.mean - 1.0) * 100 if previous.mean else 0.0
        what = changes_text(changed) if changed else "the same parameters"
        notes.append(f"new best ({gain:+.1f}% over #{previous.number}): {what}")
    elif best.number != previous.number:
        notes.append(f"best is now #{best.number}: #{previous.number} ranks lower on the pooled estimates")
    if best.mean < previous.mean - 0.5:
        if _same_configuration(rec, previous) and rec.value is not None:
            why = (
                f"#{rec.number} measured #{previous.number}'s configuration again at {rec.value:.0f}; "
                "the best is judged by the mean of its launches"
            )
        else:
            why = (
                f"#{previous.number}'s single launch is discounted by the noise "
                "(configurations are ranked by their estimate less one standard error)"
            )
        notes.append(f"best estimate down {previous.mean:.0f} -> {best.mean:.0f}: {why}")
    return "; ".join(notes)


def trial_line(
    rec: TrialRecord,
    best: TrialRecord | None,
    space: Any = None,
    *,
    previous: TrialRecord | None = None,
    engine: str | None = None,
) -> str:
    """The one line of a finished trial: number, per-level tok/s, state, the best so far,
    then (never cut) what made it a new best, why it was refused, or how it differs from
    the best. ``previous``: the best before this trial."""
    levels = " ".join(f"C{lv['concurrency']}:{tok_s_text(lv, '.0f')}" for lv in rec.levels) or "-"
    state, detail = _state(rec, engine)
    best_s = f"best {best.mean:.0f} (#{best.number})" if best and best.mean is not None else "best -"
    change = best_change(rec, best, previous, space)
    if change:
        detail = f"{detail}; {change}" if detail else change
    elif best is not None and rec.params and not (best.number == rec.number or rec.number in best.runs):
        diffs = _differences(space, rec.params, best.params)
        versus = f"vs #{best.number}: " + (changes_text(diffs) if diffs else "same configuration")
        detail = f"{detail}; {versus}" if detail else versus
    elif best is None and rec.params:
        detail = f"{detail}; {params_text(rec.params)}" if detail else params_text(rec.params)
    return f"#{rec.number:<3d} {levels:<20s} {state:<22s} {best_s:<16s} {detail}".rstrip()


class Progress:
    """Per-trial lines and a live status line for a search (see the module docstring).

    ``space`` (a :class:`tuner.space.Space`, optional) names the differences from the
    best and the number of levels of a sweep. ``interactive`` defaults to whether
    ``stream`` is a terminal (and ``TERM`` is not ``dumb``). ``quiet`` prints nothing
    (the log still gets every event).
    """

    def __init__(
        self,
        space: Any = None,
        *,
        stream: TextIO | None = None,
        quiet: bool = False,
        interactive: bool | None = None,
        tick_s: float = 1.0,
        plain_interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.space = space
        self.stream = stream if stream is not None else sys.stdout
        self.quiet = quiet
        if interactive is None:
            isatty = getattr(self.stream, "isatty", lambda: False)
            interactive = bool(isatty()) and os.environ.get("TERM", "") != "dumb"
        self.interactive = interactive and not quiet
        self.tick_s = tick_s
        self.plain_interval_s = plain_interval_s
        self.clock = clock
        try:
            # The order a trial measures its levels in: a screened trial the proxy's first
            # (tuner.fidelity), then, when promoted, the rest of the target's.
            target, proxy = space.workload, space.proxy
            order = fidelity.screening_order(proxy, target) if proxy != target else None
            self.levels: tuple[int, ...] = order or tuple(target.levels)
            self.screen_count = len(proxy.levels) if order else len(self.levels)
        except Exception:
            self.levels, self.screen_count = (), 0
        self.level_count: int | None = len(self.levels) or None
        self.engine: str | None = getattr(getattr(space, "spec", None), "engine", None)

        self.budget = 0
        self.already = 0
        self.done = 0
        self.started_at: float | None = None
        self.durations: deque[float] = deque(maxlen=ETA_WINDOW)
        self.best: TrialRecord | None = None
        self.current: int | None = None
        self.current_since: float | None = None
        self.current_level: str = ""
        self._lock = threading.RLock()
        self._shown = False
        self._last_plain: float | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # --- hooks --------------------------------------------------------------------------
    def start(self, budget: int, already_finished: int = 0) -> None:
        """The search begins: ``budget`` finished trials in the whole study, of which
        ``already_finished`` exist (a resumed study)."""
        tuner_logging.ensure_setup()
        with self._lock:
            self.budget = budget
            self.already = already_finished
            self.started_at = self.clock()
            self._last_plain = self.started_at
        logger.info(f"search started: {already_finished} of {budget} trials already finished")
        if self.interactive:
            tuner_logging.set_console(self)
            self._draw()
            if self.tick_s > 0:
                self._stop.clear()
                self._ticker = threading.Thread(target=self._tick, name="progress-status", daemon=True)
                self._ticker.start()

    def trial_started(self, number: int) -> None:
        """Trial ``number`` begins (its server is about to start)."""
        with self._lock:
            self.current = number
            self.current_since = self.clock()
            self.current_level = (
                f"starting the server, then C={self.levels[0]}" if self.levels else "starting the server"
            )
        logger.debug(f"trial #{number} started")
        self._draw()

    def level_done(self, number: int, level_index: int, metrics: Any) -> None:
        """Level ``level_index`` (0-based) of trial ``number`` is measured (``metrics``: a
        :class:`tuner.metrics.LevelMetrics` or its dict)."""
        try:
            if self.current != number:
                self.trial_started(number)
            m = metrics if isinstance(metrics, Mapping) else metrics.model_dump()
            # Screening levels count out of the proxy's; a promoted trial's out of the target's.
            total = self.screen_count if level_index < self.screen_count else self.level_count
            of = f"/{total}" if total else ""
            text = f"level {level_index + 1}{of} C={m['concurrency']}: {m['output_tok_s']:.0f} tok/s"
            if level_index + 1 < (total or 0):
                # The status line shows the level being measured now, not only the last one done.
                text += f", measuring C={self.levels[level_index + 1]} (level {level_index + 2}{of})"
            with self._lock:
                self.current_level = text
            logger.debug(f"trial #{number} {text}")
            self._draw()
        except Exception as exc:  # a display problem must never stop the study
            logger.warning(f"progress display: {exc!r}")

    def trial_done(self, study: optuna.Study, frozen_trial: FrozenTrial) -> None:
        """Trial finished (an Optuna study callback): print its line, update the estimate."""
        try:
            self._trial_done(study, frozen_trial)
        except Exception as exc:  # a display problem must never stop the study
            logger.warning(f"progress display: {exc!r}")

    def close(self, *lines: str) -> None:
        """The search ended (or was interrupted): stop redrawing, clear the status line,
        then print ``lines`` (a summary) as plain lines."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
            self._ticker = None
        with self._lock:
            if self._shown:
                self._write(CLEAR_LINE)
                self._shown = False
            elapsed = self.clock() - self.started_at if self.started_at is not None else 0.0
        tuner_logging.set_console(None)
        logger.info(f"search ended: {self.done} trials in this run, {format_duration(elapsed)}")
        for line in lines:
            _shown_log.info(line)
            if not self.quiet:
                self._write(line + "\n")

    # --- console protocol (tuner.logging) -----------------------------------------------
    def write_above(self, text: str, stream: TextIO) -> None:
        """Print a log message without breaking the status line: clear, write, redraw."""
        with self._lock:
            if self._shown:
                self._write(CLEAR_LINE)
                self._shown = False
            stream.write(text)
            stream.flush()
            self._draw()

    # --- the status ---------------------------------------------------------------------
    def status_text(self) -> str:
        """What the status line says now (also the body of the plain ``progress:`` lines)."""
        with self._lock:
            now = self.clock()
            elapsed = now - self.started_at if self.started_at is not None else 0.0
            finished = self.already + self.done
            running = self.current is not None
            shown = min(finished + (1 if running else 0), max(self.budget, 1)) if self.budget else finished
            parts = [f"trial {shown}/{self.budget}" if running else f"{finished}/{self.budget} done"]
            parts.append(f"{format_duration(elapsed)} elapsed")
            eta = self.eta_s(now)
            parts.append(f"~{format_duration(eta)} left" if eta is not None else "~? left")
            if self.best is not None and self.best.mean is not None:
                parts.append(f"best {self.best.mean:.0f} tok/s (#{self.best.number})")
            else:
                parts.append("best -")
            if running:
                parts.append(f"#{self.current} {self.current_level}".rstrip())
            return " | ".join(parts)

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left: the mean duration of the recent trials of this run times the
        trials still to finish, less the time the running one has already taken."""
        with self._lock:
            if not self.durations:
                return None
            now = self.clock() if now is None else now
            mean = sum(self.durations) / len(self.durations)
            remaining = max(0, self.budget - self.already - self.done)
            if remaining == 0:
                return 0.0
            running_for = now - self.current_since if self.current_since is not None else 0.0
            return max(0.0, mean - running_for) + (remaining - 1) * mean

    # --- internals ----------------------------------------------------------------------
    def _trial_done(self, study: optuna.Study, t: FrozenTrial) -> None:
        now = self.clock()
        rec = TrialRecord.of(t)
        best = best_record(study)
        if t.datetime_start is not None and t.datetime_complete is not None:
            duration = (t.datetime_complete - t.datetime_start).total_seconds()
        elif self.current == t.number and self.current_since is not None:
            duration = now - self.current_since
        else:
            duration = None
        with self._lock:
            previous = self.best
        line = trial_line(rec, best, self.space, previous=previous, engine=self.engine)
        with self._lock:
            self.done += 1
            if duration is not None:
                self.durations.append(max(0.0, duration))
            self.best = best
            if self.current == t.number:
                self.current = None
                self.current_since = None
                self.current_level = ""
        # Outside the lock: loguru holds its own lock while a sink (ours) runs.
        _shown_log.info(line)
        if self.quiet:
            return
        with self._lock:
            if self.interactive:
                self._write((CLEAR_LINE if self._shown else "") + line + "\n")
                self._shown = False
                self._draw()
            else:
                self._write(line + "\n")
                if self._last_plain is None or now - self._last_plain >= self.plain_interval_s:
                    self._last_plain = now
                    self._write(f"progress: {self.status_text()}\n")

    def _width(self) -> int:
        try:
            cols = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            cols = 0
        if cols <= 0:
            cols = shutil.get_terminal_size((120, 24)).columns
        return max(cols, 20)

    def _draw(self) -> None:
        if not self.interactive or self.started_at is None:
            return
        with self._lock:
            text = self.status_text()[: self._width() - 1]
            self._write(CLEAR_LINE + text)
            self._shown = True

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self._draw()
            except Exception:  # the terminal went away: stop drawing, keep the search going
                return

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
