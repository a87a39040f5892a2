"""The fault matrix: what a study keeps when things go wrong, against real parts.

Every row runs ``tuner search --backend local`` on the emulated reference space (real
emulator processes, real HTTP, real signals; PostgreSQL where the row is about it), hits
it with one fault, reruns the same command once, and checks the same four things:

* no trial lost: every configuration that got no verdict is queued again and measured;
* the budget is exact after one rerun: ``--budget N`` trials with a verdict, no more;
* no server left behind;
* no stalled or failing level stored as a measurement.

The space is the packaged emulated space with a tiny workload (levels 1 and 16, a few
dozen tokens) so that a trial lasts a few seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import psycopg
import pytest
from optuna.trial import TrialState

from tests.fixtures_launchers import SshServer, running_sshd
from tests.helpers import emulator_pids
from tests.postgres import pg_bin, postgres_server
from tuner import budget
from tuner.net import free_port

EMULATED = Path(__file__).resolve().parents[1] / "search_spaces" / "kimi-k2.6-8x-rtx-pro-6000-emulated.yaml"
#: The emulator at 20x speed, loading in 0.3 s.
EMULATOR = (
    "[python3, -m, tuner.sim.server, --hardware, rtx-pro-6000-pcie-x8, --model, kimi-k2.6, "
    '--speedup, "20", --load-delay, "0.3", --]'
)
TINY_WORKLOAD = "{kind: burst, levels: [1, 16], max_tokens: 48, single_max_tokens: 16}"
RUN_TIMEOUT_S = 120


def fault_space(
    workdir: Path,
    port: int,
    *,
    extra: str = "",
    command: str = EMULATOR,
    workload: str = TINY_WORKLOAD,
    hf_token: bool = False,
) -> Path:
    path = workdir / "faults.yaml"
    path.write_text(
        textwrap.dedent(f"""
        extends: {EMULATED}
        name: faults
        launch:
          command: {command}
          flags: {{--port: {port}}}
          hf_token: {str(hf_token).lower()}
        workload: {workload}
        """)
        + textwrap.dedent(extra)
    )
    return path


def env_for(workdir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_")}
    return dict(
        env,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        XDG_RUNTIME_DIR=str(workdir / "run"),
        **extra,
    )


def search_argv(space: Path, n: int, *extra: str, backend: str = "local") -> list[str]:
    return [
        sys.executable, "-m", "tuner", "search", "--backend", backend, "--space", str(space),
        "--budget", str(n), "--health-timeout", "30", "--no-annotate", "--seed", "1", "--no-prune", *extra,
    ]  # fmt: skip


def run_search(space: Path, n: int, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        search_argv(space, n, *extra), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env
    )


def start_search(
    space: Path, n: int, env: dict[str, str], *extra: str, backend: str = "local"
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        search_argv(space, n, *extra, backend=backend),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # Ctrl-C as at a terminal
    )


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def serving(workdir: Path, study: str = "faults") -> bool:
    return any(
        "ready to roll" in p.read_text(errors="replace")
        for p in (workdir / "studies" / study).glob("trial-*.log")
    )


def trials_of(workdir: Path, study: str = "faults") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=f"sqlite:///{workdir}/studies/{study}.db").get_trials()


def assert_row(trials: list[optuna.trial.FrozenTrial], n: int, port: int) -> None:
    """The four checks of every row."""
    assert budget.verdicts(trials) == n, [
        (t.number, t.state.name, t.user_attrs.get("outcome")) for t in trials
    ]
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    # Queued start points beyond the budget may wait; a queued retry may not (it runs first).
    assert not [t for t in trials if t.state == TrialState.WAITING and "failed_trial" in t.system_attrs]
    for t in trials:  # no trial lost: each one without a verdict was measured again
        if (
            t.state.is_finished()
            and not budget.has_verdict(t)
            and t.user_attrs.get("outcome") != "infeasible"
        ):
            again = [r for r in trials if r.system_attrs.get("failed_trial") == t.number]
            assert again and budget.has_verdict(again[0]) and again[0].params == t.params, t.number
    for t in trials:  # a measured level is a level of served requests
        for lv in t.user_attrs.get("levels") or []:
            assert lv["completed"] > 0 and not lv.get("failed") and not lv.get("errors"), (t.number, lv)
    assert emulator_pids(port) == []


# ------------------------------------------------------------------------------- rows


def test_two_searches_on_one_host_second_refuses_first_unharmed(workdir: Path):
    port = free_port()
    space, env = fault_space(workdir, port), env_for(workdir)
    first = start_search(space, 2, env)
    time.sleep(0.3)
    second = run_search(space, 2, env)
    out = first.communicate(timeout=RUN_TIMEOUT_S)[0]
    assert first.returncode == 0, out
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"port {port} is in use by another tuner run on this host" in second.stderr
    assert "Traceback" not in second.stderr
    trials = trials_of(workdir)
    assert not [t for t in trials if t.user_attrs.get("failure_class") == "crash"]
    assert run_search(space, 2, env).returncode == 0
    assert_row(trials_of(workdir), 2, port)


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_then_rerun_reaches_the_budget(workdir: Path, presses: int):
    port = free_port()
    space, env = fault_space(workdir, port), env_for(workdir)
    proc = start_search(space, 2, env)
    wait_for(lambda: serving(workdir), 60, "the first server")
    for _ in range(presses):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, out
    assert emulator_pids(port) == []
    again = run_search(space, 2, env)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = trials_of(workdir)
    stopped = [t for t in trials if t.user_attrs.get("failure_class") in ("interrupted", "orphaned")]
    assert len(stopped) == 1
    assert_row(trials, 2, port)


@pytest.mark.parametrize("other_host", [False, True])
def test_kill_9_then_rerun_stops_the_orphan_and_reaches_the_budget(workdir: Path, other_host: bool):
    port = free_port()
    space = fault_space(workdir, port)
    env = env_for(workdir, TUNER_HEARTBEAT_S="0.5", TUNER_GRACE_S="3")
    proc = start_search(space, 2, env)
    wait_for(lambda: serving(workdir), 60, "the first server")
    proc.kill()
    proc.wait()
    assert emulator_pids(port)  # its server is left behind
    (running,) = [t for t in trials_of(workdir) if t.state == TrialState.RUNNING]
    if other_host:
        # Stand-in for a worker on another machine: its trial names another host, whose
        # processes this host cannot see; only the heartbeat grace can tell it is gone.
        storage = optuna.storages.RDBStorage(f"sqlite:///{workdir}/studies/faults.db")
        owner = dict(running.user_attrs["owner"], host="gpu-elsewhere")
        storage.set_trial_user_attr(running._trial_id, "owner", owner)
    again = run_search(space, 2, env)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = trials_of(workdir)
    killed = trials[running.number]
    assert killed.state == TrialState.FAIL
    if other_host:
        assert "outcome" not in killed.user_attrs  # failed by the heartbeat grace (stale)
    else:
        assert killed.user_attrs["failure_class"] == "orphaned"  # at once: its owner is dead
    assert_row(trials, 2, port)


def test_a_stopped_server_is_a_hang_not_a_measurement(workdir: Path):
    port = free_port()
    workload = "{kind: burst, levels: [1, 16], max_tokens: 400, single_max_tokens: 200}"
    command = EMULATOR.replace('"20"', '"2"')
    space, env = fault_space(workdir, port, command=command, workload=workload), env_for(workdir)
    proc = start_search(space, 2, env, "--stall-timeout", "2")
    wait_for(lambda: serving(workdir), 60, "the first server")
    time.sleep(0.8)  # into the sweep
    (pid,) = emulator_pids(port)
    os.kill(pid, signal.SIGSTOP)
    out = proc.communicate(timeout=RUN_TIMEOUT_S)[0]
    assert proc.returncode == 0, out
    trials = trials_of(workdir)
    hung = trials[0]
    assert hung.user_attrs["failure_class"] == "hang", hung.user_attrs
    assert "no token for" in hung.user_attrs["reason"]
    assert len(hung.user_attrs["levels"]) < 2  # the stalled level is not among them
    assert_row(trials, 2, port)


def test_failing_requests_make_no_measurement(workdir: Path):
    port = free_port()
    faults = ["bad-sse:3", "error-event:3", "http-429:3", "http-500:3"]
    extra = f"""
        parameters:
          fault: {{env: TUNER_EMULATOR_FAULT, type: categorical, choices: {faults}}}
        start: [{", ".join(f'{{fault: "{f}"}}' for f in faults)}]
    """
    space, env = fault_space(workdir, port, extra=extra), env_for(workdir)
    done = run_search(space, len(faults), env)
    assert done.returncode == 0, done.stdout + done.stderr
    trials = trials_of(workdir)
    assert [t.user_attrs["failure_class"] for t in trials[: len(faults)]] == ["request-errors"] * len(faults)
    assert_row(trials, len(faults), port)


def test_a_setup_error_stops_the_study_after_at_most_3_launches(workdir: Path):
    port = free_port()
    space = fault_space(workdir, port, command="[python3, -m, no_such_engine_module, --]")
    done = run_search(space, 6, env_for(workdir))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "No module named" in done.stderr and "server log: studies/faults/trial-" in done.stderr
    trials = trials_of(workdir)
    launched = [t for t in trials if t.user_attrs.get("log_path")]
    assert 1 <= len(launched) <= 3
    assert budget.verdicts(trials) == 0  # nothing learned about any configuration
    assert emulator_pids(port) == []


def ssh_client_for(workdir: Path, server: SshServer) -> str:
    """A directory to put first on PATH: its ``ssh`` is the system client reading the test
    sshd's client configuration, as a user's ``~/.ssh/config`` names a GPU host."""
    bindir = workdir / "bin"
    bindir.mkdir()
    ssh = bindir / "ssh"
    ssh.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {server.config_file} "$@"\n')
    ssh.chmod(0o755)
    return str(bindir)


def streams_to(port: int) -> int:
    """Established TCP connections to ``127.0.0.1:port`` (its server's side), from
    /proc/net/tcp: the requests a server is answering now."""
    local = f"0100007F:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1] == local and row.split()[3] == "01")


#: How long the ssh host's sshd stays down: longer than a trial's remaining requests take
#: to fail, well within the transport's reconnection window (RECONNECT_S).
SSHD_DOWN_S = 3.0


def test_sshd_stopped_mid_trial_and_back_requeues_the_trial(workdir: Path):
    """The GPU host's sshd stops in the middle of a sweep (listener and connections, as
    stopping the ssh service does) and is back 3 s later. The remote server keeps running;
    the port forward's connection is cut, so the requests in flight fail for the host's
    reasons: the trial fails as ``unreachable`` (no verdict on its configuration), its
    server is stopped once ssh answers again, and its configuration is measured again,
    first, in the same run."""
    port = free_port()
    workload = "{kind: burst, levels: [1, 16], max_tokens: 400, single_max_tokens: 200}"
    # The remote login's PATH has the system python3, not this one (as a GPU host's would).
    command = EMULATOR.replace("python3", sys.executable).replace('"20"', '"4"')
    space = fault_space(workdir, port, command=command, workload=workload)
    with running_sshd() as server:
        env = env_for(workdir)
        env["PATH"] = ssh_client_for(workdir, server) + os.pathsep + env["PATH"]
        began = time.monotonic()
        proc = start_search(space, 2, env, "--hosts", "localhost", backend="ssh")
        try:
            # Into the sweep: the C=16 level's streams are open (through the forward).
            wait_for(lambda: streams_to(port) >= 8, 60, "the first trial's C=16 level")
            remote = emulator_pids(port)  # the wrapper shell and the server
            server.stop()
            assert remote and emulator_pids(port) == remote  # they outlive the host's sshd
            time.sleep(SSHD_DOWN_S)
            server.start()
            out = proc.communicate(timeout=RUN_TIMEOUT_S)[0]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                for pid in emulator_pids(port):  # a failed test leaves no server on the host
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(os.getpgid(pid), signal.SIGTERM)
        took = time.monotonic() - began
        assert proc.returncode == 0, out
        assert "Traceback" not in out
        trials = trials_of(workdir)
        cut = [t for t in trials if t.user_attrs.get("failure_class") == "unreachable"]
        assert len(cut) == 1, [(t.number, t.user_attrs.get("reason")) for t in trials]
        assert "dropped while the server was measured" in cut[0].user_attrs["reason"]
        assert [lv["concurrency"] for lv in cut[0].user_attrs["levels"]] == [1]  # C=16 was cut: not stored
        assert_row(trials, 2, port)
        for slot in Path.home().joinpath(".cache", "tuner").glob(f"tuner-{port}.*"):
            slot.unlink()  # the remote slot files of this port (the pid file is gone already)
    assert took < 60, took


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL server binaries not installed")
def test_postgres_restarted_mid_study_three_workers_reach_the_budget(workdir: Path):
    """Three workers (processes) on the simulator share a study on PostgreSQL; the database
    stops for a few seconds in the middle and comes back: the workers wait, none fails."""
    with postgres_server() as url:
        env = env_for(workdir)
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
                    "pg",
                    "--budget",
                    "24",
                    "--seed",
                    str(i),
                    "--quiet",
                    "--no-annotate",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
            for i in range(3)
        ]
        try:

            def some_done() -> bool:
                try:
                    return budget.verdicts(optuna.load_study(study_name="pg", storage=url).get_trials()) >= 4
                except Exception:
                    return False

            wait_for(some_done, 90, "the first trials")
            url.stop()
            time.sleep(4)
            url.start()
            outputs = [p.communicate(timeout=RUN_TIMEOUT_S)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        assert [p.returncode for p in procs] == [0, 0, 0], outputs
        assert all("Traceback" not in out for out in outputs)
        trials = optuna.load_study(study_name="pg", storage=url).get_trials()
    assert budget.verdicts(trials) == 24
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert not [t for t in trials if t.state == TrialState.WAITING and "failed_trial" in t.system_attrs]


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL server binaries not installed")
def test_a_wrong_database_password_is_one_line_and_not_retried(workdir: Path):
    """PostgreSQL refuses the password: each command says so in one line with exit 2, never
    prints the password, tries once (the server logs one refused login per command, where a
    retried one would log :data:`tuner.storage.OPEN_ATTEMPTS`), and creates nothing."""
    wrong = "Wrong-Pass-4711"
    with postgres_server(password="Right-Pass-0815") as url:
        bad = url.replace("Right-Pass-0815", wrong)
        commands = (
            ["search", "--budget", "2", "--study", "pgauth"],
            ["best", "--study", "pgauth"],
            ["trials"],
        )
        for cmd in commands:
            done = subprocess.run(
                [sys.executable, "-m", "tuner", *cmd, "--storage", bad],
                capture_output=True, text=True, timeout=60, env=env_for(workdir),
            )  # fmt: skip
            printed = done.stdout + done.stderr
            assert done.returncode == 2, printed
            assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in printed, printed
            assert 'password authentication failed for user "postgres"' in done.stderr
            assert wrong not in printed
        refused = url.log_path.read_text().count("password authentication failed")
        assert refused == len(commands)  # one login per command: not retried
        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
            tables = conn.execute(
                "select count(*) from information_schema.tables where table_schema = 'public'"
            )
            assert tables.fetchone() == (0,)  # no schema, no study
    assert not (workdir / "studies").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root")
def test_a_full_file_system_stops_the_study_and_the_rerun_completes_it(workdir: Path):
    port = free_port()
    space, env = fault_space(workdir, port), env_for(workdir)
    studies = workdir / "studies"
    studies.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(studies)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.decode().strip()}")
    try:
        proc = start_search(space, 3, env)
        wait_for(lambda: serving(workdir), 60, "the first server")
        filler = studies / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)  # until full
        out = proc.communicate(timeout=RUN_TIMEOUT_S)[0]
        assert proc.returncode == 3, out
        assert "file system holding the study or its logs is full" in out and "Traceback" not in out
        assert emulator_pids(port) == []
        filler.unlink()
        again = run_search(space, 3, env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert_row(trials_of(workdir), 3, port)
    finally:
        subprocess.run(["umount", "-l", str(studies)], capture_output=True)


# --------------------------------------------------------------------------- secrets

HF_TOKEN = "hf_FaultMatrixToken0123456789"
DB_PASSWORD = "pg-Secret-Pass-9876"


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL server binaries not installed")
@pytest.mark.parametrize("asks_for_token", [False, True])
def test_secrets_reach_nothing_stored_or_printed(workdir: Path, asks_for_token: bool):
    port = free_port()
    seen = workdir / "server-env"
    # The server dumps its whole environment where the tuner does not look, and prints the
    # token and storage variables into its log.
    command = (
        f'[sh, -c, \'env > {seen}-$$; echo "HF_TOKEN=$HF_TOKEN TUNER=$TUNER_STORAGE"; exec "$0" "$@"\', '
        + EMULATOR.strip("[]")
        + "]"
    )
    space = fault_space(workdir, port, command=command, hf_token=asks_for_token)
    with postgres_server() as url:
        secret_url = url.replace("postgres@", f"postgres:{DB_PASSWORD}@")  # trust auth ignores it
        env = env_for(workdir, TUNER_HF_TOKEN=HF_TOKEN, TUNER_STORAGE=secret_url)
        argv = [a for a in search_argv(space, 2) if a != "--no-annotate"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        printed = done.stdout + done.stderr
        for cmd in (["best"], ["trials"], ["best", "--format", "json"]):
            shown = subprocess.run(
                [sys.executable, "-m", "tuner", *cmd, "--study", "faults"],
                capture_output=True, text=True, timeout=60, env=env,
            )  # fmt: skip
            assert shown.returncode == 0, shown.stdout + shown.stderr
            printed += shown.stdout + shown.stderr
        study = optuna.load_study(study_name="faults", storage=url)
        stored = repr([(t.user_attrs, t.system_attrs) for t in study.get_trials()]) + repr(study.user_attrs)
        dump = subprocess.run(
            ["pg_dump", "--dbname", url.replace("postgresql+psycopg", "postgresql")],
            capture_output=True,
            timeout=60,
        )
        stored += dump.stdout.decode(errors="replace") if dump.returncode == 0 else ""
    files = b"".join(p.read_bytes() for p in (workdir / "studies").rglob("*") if p.is_file())
    server_saw = b"".join(p.read_bytes() for p in workdir.glob("server-env-*"))
    assert server_saw, "the server did not run"
    for secret in (HF_TOKEN, DB_PASSWORD):
        assert secret not in printed
        assert secret not in stored
        assert secret.encode() not in files
    assert DB_PASSWORD.encode() not in server_saw
    assert not re.search(rb"^TUNER_", server_saw, re.MULTILINE)  # none of the tuner's settings
    assert (HF_TOKEN.encode() in server_saw) is asks_for_token
    assert "TUNER_STORAGE" in printed or "--study faults" in printed  # a hint that works when copied
