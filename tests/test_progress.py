"""Live progress of a search: a status line redrawn in place on a terminal, plain lines in a pipe.

The end-to-end tests run a short simulated search in a child process whose stdout is a
pseudo-terminal (pty.openpty) or a pipe, with the Progress hooks wired to the study
the way ``tuner search`` wires them, and read what a person (or a log file) would see.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from loguru import logger
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tuner import logging as tuner_logging
from tuner.progress import CLEAR_LINE, Progress, format_duration

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BUDGET = 6

CHILD = textwrap.dedent("""
    import sys
    from tuner import logging as tuner_logging
    from tuner.measurers import SimMeasurer
    from tuner.objectives import Objective
    from tuner.progress import Progress
    from tuner.space import DEFAULT_SPACE, load_space, resolve_space
    from tuner.study import Search

    budget, plain_interval = int(sys.argv[1]), float(sys.argv[2])
    tuner_logging.setup("WARNING", "search.log")
    space = load_space(resolve_space(DEFAULT_SPACE))
    progress = Progress(space, tick_s=0.2, plain_interval_s=plain_interval)
    search = Search(
        space, SimMeasurer(space.hardware, space.model), study_name="progress",
        storage="sqlite:///studies/progress.db", objective=Objective(), seed=7, budget=budget,
        on_trial=progress.trial_done, on_level=progress.level_done,
    )
    progress.start(budget, search.finished())
    try:
        search.run()
    finally:
        progress.close("search finished")
""")


def _child_cmd(plain_interval: float = 0.0) -> list[str]:
    return [sys.executable, "-c", CHILD, str(BUDGET), str(plain_interval)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    env["TERM"] = "xterm"
    return env


def run_under_pty(cmd: list[str], cwd: Path, timeout: float = 60.0) -> str:
    """Run ``cmd`` with stdout and stderr on a pseudo-terminal of 200 columns; its output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(
        cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=_env(), start_new_session=True
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side of the terminal
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        os.close(master)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode(errors="replace")


def test_terminal_gets_a_status_line_updated_in_place(workdir):
    out = run_under_pty(_child_cmd(), workdir)
    assert "\r" in out and CLEAR_LINE in out, out[:2000]
    # The status line: trial i of N, elapsed, time left (estimated once a trial has finished),
    # best so far, and the running trial's level.
    statuses = [s for s in out.split(CLEAR_LINE) if s.startswith("trial ")]
    assert statuses, out[:2000]
    assert any(re.search(rf"trial \d+/{BUDGET} \| \d+:\d\d:\d\d elapsed \| ~", s) for s in statuses)
    assert any(re.search(r"~\d+:\d\d:\d\d left \| best \d+ tok/s \(#\d+\)", s) for s in statuses), statuses
    assert any(re.search(r"\| #\d+ level 1/\d+ C=1: \d+ tok/s", s) for s in statuses), statuses
    # Every finished trial printed its line, which scrolls above the status line.
    text = ANSI.sub("", out).replace("\r\n", "\n")
    for n in range(BUDGET):
        assert re.search(rf"(^|[\r\n])#{n} +\S", text), f"no line for trial #{n}"
    assert "search finished" in text
    # Status lines never wrap: each is cut to the terminal's width.
    assert all(len(s.split("\r")[0].split("\n")[0]) < 200 for s in statuses)
    # The log file has the trial lines (with timestamps), not the status line.
    log = (workdir / "search.log").read_text()
    assert "#0 " in log and "elapsed" not in log


def test_pipe_gets_plain_lines_only(workdir):
    proc = subprocess.run(
        _child_cmd(plain_interval=0.0), cwd=workdir, capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "\r" not in out
    assert "\x1b" not in out
    lines = proc.stdout.splitlines()
    trial_lines = [line for line in lines if re.match(r"#\d+ ", line)]
    assert len(trial_lines) == BUDGET, proc.stdout
    progress_lines = [line for line in lines if line.startswith("progress: ")]
    assert progress_lines and re.search(rf"{BUDGET}/{BUDGET} done \| .* elapsed", progress_lines[-1])
    assert lines[-1] == "search finished"


def _trial(value: float, start: dt.datetime, seconds: float, ep_size: int = 8) -> optuna.trial.FrozenTrial:
    t = optuna.trial.create_trial(
        params={"ep_size": ep_size},
        distributions={"ep_size": CategoricalDistribution([1, 8])},
        value=value,
        state=TrialState.COMPLETE,
        user_attrs={"outcome": "complete", "levels": [{"concurrency": 1, "output_tok_s": value}]},
    )
    t.datetime_start = start
    t.datetime_complete = start + dt.timedelta(seconds=seconds)
    return t


def test_estimate_of_time_left_comes_from_measured_trial_durations():
    now = [100.0]
    stream = io.StringIO()
    p = Progress(stream=stream, interactive=True, tick_s=0, clock=lambda: now[0])
    study = optuna.create_study(direction="maximize")
    p.start(budget=10, already_finished=2)
    assert "~? left" in p.status_text()
    t0 = dt.datetime(2026, 1, 1)
    for value, secs, ep in [(102.0, 60.0, 1), (103.0, 120.0, 8)]:
        study.add_trial(_trial(value, t0, secs, ep))
        p.trial_done(study, study.trials[-1])
    # 2 + 2 finished of 10: 6 left at a mean of 90 s each.
    assert p.eta_s() == pytest.approx(6 * 90.0)
    p.trial_started(4)
    now[0] += 30.0
    assert p.eta_s() == pytest.approx(60.0 + 5 * 90.0)
    text = p.status_text()
    assert text.startswith("trial 5/10 | 0:00:30 elapsed | ~0:08:30 left | best 103 tok/s (#1) | #4 starting")
    p.close()
    out = stream.getvalue()
    assert out.endswith(CLEAR_LINE)  # the status line is gone when the search ends
    assert "#1 " in out


def test_hooks_never_raise_into_the_study():
    p = Progress(stream=io.StringIO(), interactive=False)
    p.start(budget=3)
    p.level_done(0, 0, object())  # not metrics at all
    p.trial_done(None, None)  # type: ignore[arg-type]
    p.close()


def test_format_duration():
    assert format_duration(0) == "0:00:00"
    assert format_duration(3723.4) == "1:02:03"
    assert format_duration(90061) == "1 days, 1:01:01"


@pytest.fixture
def loguru_restored():
    yield
    tuner_logging.set_console(None)
    logger.remove()
    logger.add(sys.stderr)
    tuner_logging._configured = False


def test_log_messages_print_above_the_status_line(tmp_path, loguru_restored):
    out, err = io.StringIO(), io.StringIO()
    tuner_logging.setup("INFO", tmp_path / "run.log", stream=err, route_standard_logging=False)
    p = Progress(stream=out, interactive=True, tick_s=0)
    p.start(budget=4)
    logger.warning("ssh connection dropped")
    assert "ssh connection dropped" in err.getvalue()
    # The status line was cleared before the message and drawn again after it.
    assert out.getvalue().count(CLEAR_LINE) >= 3 and out.getvalue().endswith(
        "0/4 done | 0:00:00 elapsed | ~? left | best -"
    )
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial(100.0, dt.datetime(2026, 1, 1), 5.0))
    p.trial_done(study, study.trials[-1])
    p.close("summary line")
    # Trial lines are on stdout once: the console log skips them, the log file keeps them.
    assert "#0 " in out.getvalue() and "#0 " not in err.getvalue()
    log = (tmp_path / "run.log").read_text()
    assert "ssh connection dropped" in log and "#0 " in log and "summary line" in log
