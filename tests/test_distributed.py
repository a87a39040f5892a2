"""Many workers, no lost trials: PostgreSQL-backed studies, kill -9, Ctrl-C, settings."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.helpers import emulator_pids
from tests.postgres import pg_bin, postgres_server
from tests.test_study import make_search
from tuner import budget
from tuner.errors import UsageError
from tuner.net import free_port
from tuner.settings import Settings
from tuner.settings import load as load_settings
from tuner.sim.serving import DEFAULT_NOISE
from tuner.space import load_space, resolve_space
from tuner.study import FINISHED

FAST_HEARTBEAT = {"TUNER_HEARTBEAT_S": "0.5", "TUNER_GRACE_S": "3"}


def tuner_env(workdir: Path, **extra: str) -> dict[str, str]:
    return dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        XDG_RUNTIME_DIR=str(workdir / "run"),
        **extra,
    )


def emulated_space(workdir: Path, port: int) -> Path:
    """Two knobs on the emulator at 2x speed: a trial's sweep lasts several seconds."""
    path = workdir / "emu.yaml"
    path.write_text(
        textwrap.dedent(f"""
        name: emu
        engine: sglang
        hardware: rtx-pro-6000-pcie-x8
        model: kimi-k2.6
        launch:
          command: [python3, -m, tuner.sim.server, --speedup, "2", --load-delay, "0.3", --]
          flags: {{--model-path: /models/Kimi-K2.6, --tp-size: 8, --host: 127.0.0.1, --port: {port}}}
        parameters:
          ep_size: {{flag: --ep-size, type: categorical, choices: [1, 4, 8]}}
          steps: {{flag: --num-continuous-decode-steps, type: categorical, choices: [1, 8]}}
        workload: {{kind: burst, levels: [1, 32], max_tokens: 192, single_max_tokens: 32}}
    """)
    )
    return path


def search_cmd(space: Path, budget: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tuner",
        "search",
        "--backend",
        "local",
        "--space",
        str(space),
        "--budget",
        str(budget),
        "--health-timeout",
        "30",
        "--no-annotate",
        "--seed",
        "1",
        *extra,
    ]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def serving(workdir: Path) -> bool:
    """A trial's server is up (its log has SGLang's ready line)."""
    logs = (workdir / "studies" / "emu").glob("trial-*.log")
    return any("ready to roll" in p.read_text(errors="replace") for p in logs)


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL server binaries not installed")
def test_three_workers_on_postgres_end_with_exactly_the_budget(workdir: Path):
    with postgres_server() as url:
        url = url.replace("postgres@", "postgres:s3cret-pw@")  # trust auth ignores it; must never show
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tuner",
                    "search",
                    "--storage",
                    url,
                    "--study",
                    "dist",
                    "--budget",
                    "30",
                    "--seed",
                    str(i),
                    "--quiet",
                    "--no-annotate",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=tuner_env(workdir),
            )
            for i in range(3)
        ]
        outputs = [p.communicate(timeout=300)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], outputs
        assert all("s3cret-pw" not in out and "postgres:***@" in out for out in outputs)
        study = optuna.load_study(study_name="dist", storage=url)
        trials = study.get_trials()
        finished = [t for t in trials if t.state in FINISHED]
        assert budget.verdicts(trials) == 30  # rejected proposals are recorded, not counted
        assert not [t for t in trials if t.state == TrialState.RUNNING]
        assert len({t.number for t in trials}) == len(trials)
        for t in finished:
            assert t.user_attrs["outcome"] in ("complete", "reused", "pruned", "infeasible", "failed")
            assert "config_key" in t.user_attrs and "argv" in t.user_attrs
            if t.user_attrs["outcome"] in ("complete", "reused", "pruned"):
                assert t.user_attrs["levels"], t.number
            assert "s3cret-pw" not in repr(t.user_attrs)


def test_killed_worker_trial_fails_after_grace_and_is_retried(workdir: Path):
    port = free_port()
    space = emulated_space(workdir, port)
    env = tuner_env(workdir, **FAST_HEARTBEAT)
    first = subprocess.Popen(
        search_cmd(space, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        wait_for(lambda: serving(workdir), 60, "the first worker's server")
    finally:
        first.kill()  # kill -9: no cleanup, its server and RUNNING trial are left behind
        first.wait()
    assert emulator_pids(port)  # the orphaned server is still running
    second = subprocess.run(search_cmd(space, 4), capture_output=True, text=True, timeout=240, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    study = optuna.load_study(study_name="emu", storage=f"sqlite:///{workdir}/studies/emu.db")
    trials = study.get_trials()
    killed = trials[0]
    assert killed.state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retries) == 1 and retries[0].state in FINISHED and retries[0].params == killed.params
    assert budget.verdicts(trials) == 4  # the killed trial gave no verdict: its retry did
    assert emulator_pids(port) == []
    listing = subprocess.run(
        [sys.executable, "-m", "tuner", "trials"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=workdir,
    )
    assert f"retry of #{killed.number}" in listing.stdout


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_server_records_the_trial_and_rerun_resumes(workdir: Path):
    port = free_port()
    space = emulated_space(workdir, port)
    env = tuner_env(workdir)
    proc = subprocess.Popen(
        search_cmd(space, 3),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        # Ctrl-C as at a terminal, even where the test run itself was started in the background
        # by a script and so inherited SIGINT ignored.
        preexec_fn=_sigint_default,
    )
    try:
        wait_for(lambda: serving(workdir), 60, "the server of the first trial")
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert "interrupted" in out and "trials (" in out and "Traceback" not in out
    assert emulator_pids(port) == []
    study = optuna.load_study(study_name="emu", storage=f"sqlite:///{workdir}/studies/emu.db")
    (stopped,) = [t for t in study.get_trials() if t.state == TrialState.FAIL]
    assert stopped.user_attrs["failure_class"] == "interrupted"
    again = subprocess.run(search_cmd(space, 3), capture_output=True, text=True, timeout=240, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = optuna.load_study(study_name="emu", storage=f"sqlite:///{workdir}/studies/emu.db").get_trials()
    assert budget.verdicts(trials) == 3  # the interrupted trial gave no verdict: its retry did
    assert any(t.params == stopped.params and t.state == TrialState.COMPLETE for t in trials)
    assert emulator_pids(port) == []


def test_two_workers_on_the_simulator_run_trials_at_once(workdir: Path):
    space = load_space(resolve_space("kimi-k2.6-8x-rtx-pro-6000"))
    search = make_search(space, 8, noise=DEFAULT_NOISE)
    search.run(workers=2)
    trials = [t for t in search.study.get_trials() if t.state in FINISHED]
    assert budget.verdicts(trials) == 8  # rejected proposals are recorded, not counted
    spans = sorted((t.datetime_start, t.datetime_complete) for t in trials)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), "no two trials overlapped"


def test_settings_from_environment_and_toml(workdir: Path, monkeypatch):
    (workdir / "tuner.toml").write_text('hosts = ["gpu-a", "gpu-b"]\nhealth_timeout_s = 2400\n')
    s = load_settings()
    assert s.hosts == ["gpu-a", "gpu-b"] and s.health_timeout_s == 2400
    monkeypatch.setenv("TUNER_HOSTS", "x, y")
    monkeypatch.setenv("TUNER_HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("TUNER_STORAGE", "postgresql+psycopg://u:pw@db/tuner")
    s = Settings()
    assert s.hosts == ["x", "y"]
    assert "hf_secret_value" not in repr(s) and "pw@" not in repr(s)
    assert s.secret_env() == {"HF_TOKEN": "hf_secret_value"}
    monkeypatch.setenv("TUNER_WORKERS", "0")
    with pytest.raises(UsageError, match="workers"):
        load_settings()
