"""Bad input and settings: one clear line and exit 2, nothing created, every command finds a
study the way ``tuner search`` stored it, and ``tuner best`` names the GPU host's interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import optuna
from sqlalchemy import text

from tuner.net import free_port


def tuner(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_")}
    return subprocess.run(
        [sys.executable, "-m", "tuner", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
    )


def one_clear_line(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_study_name_is_a_name(workdir: Path):
    one_clear_line(tuner("search", "--study", "../../x", "--budget", "1"))
    one_clear_line(tuner("best", "--study", "../x"))
    assert not any(workdir.parent.parent.glob("x*")) and not (workdir / "studies").exists()


def test_read_only_commands_create_nothing(workdir: Path):
    for cmd in ("best", "trials", "report"):
        one_clear_line(tuner(cmd, "--storage", "sqlite:///studies/missing.db"))
    one_clear_line(tuner("best", "--storage", f"sqlite:///{workdir}/nonexistent/x.db"))
    assert list(workdir.iterdir()) == []


def test_storage_errors_are_one_line_without_the_password(workdir: Path):
    done = tuner("search", "--storage", "nosuchdb://u:pw-hidden@host/db", "--budget", "1")
    one_clear_line(done)
    port = free_port()  # nothing listens there
    started = time.monotonic()
    done = tuner(
        "search", "--storage", f"postgresql+psycopg://u:pw-hidden@127.0.0.1:{port}/db", "--budget", "1"
    )
    one_clear_line(done)
    assert "pw-hidden" not in done.stderr and "cannot open storage" in done.stderr
    assert time.monotonic() - started < 60


def test_seed_and_noise_are_checked(workdir: Path):
    one_clear_line(tuner("search", "--seed", "-1", "--budget", "1"))
    one_clear_line(tuner("search", "--noise", "1e308", "--budget", "1"))
    one_clear_line(tuner("simulate", "--noise", "nan"))
    assert not (workdir / "studies").exists()


def test_a_constraint_that_always_fails_is_found_when_the_space_loads(workdir: Path, space):
    path = workdir / "bad.yaml"
    path.write_text((workdir / "small.yaml").read_text() + "constraints: [{expr: '1/0 == 1'}]\n")
    done = tuner("search", "--space", str(path), "--budget", "1")
    one_clear_line(done)
    assert "constraints[0].expr" in done.stderr
    assert not (workdir / "studies").exists()


def test_simulate_exits_non_zero_on_a_failed_launch():
    done = tuner("simulate", "--", "--tp-size", "8", "--ep-size", "3")
    assert done.returncode == 1 and "launch failed (invalid-args)" in done.stdout


def test_every_command_reads_the_storage_setting(workdir: Path):
    url = f"sqlite:///{workdir}/elsewhere/envstudy.db"
    env = {"TUNER_STORAGE": url}
    done = tuner("search", "--budget", "2", "--study", "envstudy", "--quiet", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    hint = next(ln for ln in done.stdout.splitlines() if ln.startswith("unit file: "))
    assert hint == "unit file: tuner best --study envstudy > sglang.service"
    for cmd in (["best"], ["trials"], ["report", "-o", str(workdir / "r.html")]):
        shown = tuner(*cmd, "--study", "envstudy", env=env)
        assert shown.returncode == 0, shown.stdout + shown.stderr
    assert not (workdir / "studies" / "envstudy.db").exists()


def test_a_hint_with_a_password_names_the_setting(workdir: Path):
    from tuner.commands.search import storage_hint

    hint = storage_hint("s", "postgresql+psycopg://u:secret@db/tuner")
    assert "secret" not in hint and "***" not in hint and '--storage "$TUNER_STORAGE"' in hint
    assert storage_hint("s", "sqlite:///a b.db") == " --study s --storage 'sqlite:///a b.db'"


def test_best_names_the_trial_hosts_interpreter_never_the_local_one(workdir: Path):
    assert tuner("search", "--budget", "2", "--quiet", "--study", "py").returncode == 0
    unit = tuner("best", "--study", "py").stdout
    assert "ExecStart=/usr/bin/env python3 " in unit and sys.executable not in unit
    assert "pin one with tuner best --python PATH" in unit
    # The interpreter the trial's host resolved, as the ssh/systemd backends record it (the
    # trial is finished, so the stand-in writes the attribute's row itself).
    study = optuna.load_study(study_name="py", storage=f"sqlite:///{workdir}/studies/py.db")
    number = json.loads(tuner("best", "--study", "py", "--format", "json").stdout)["trial"]
    trial_id = study.get_trials()[number]._trial_id
    storage = optuna.storages.RDBStorage(f"sqlite:///{workdir}/studies/py.db")
    with storage.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (:t, 'python', :v)"),
            {"t": trial_id, "v": '"/opt/gpu-venv/bin/python3"'},
        )
    unit = tuner("best", "--study", "py").stdout
    assert "ExecStart=/opt/gpu-venv/bin/python3 " in unit
    assert "ExecStart=/srv/py " in tuner("best", "--study", "py", "--python", "/srv/py").stdout


def test_dashboard_answers_only_the_names_it_was_bound_to(workdir: Path):
    assert tuner("search", "--budget", "1", "--quiet", "--study", "dash").returncode == 0
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner", "dashboard", "--study", "dash", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=clean,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                ok = httpx.get(f"http://127.0.0.1:{port}/api/studies", timeout=5, trust_env=False)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "dashboard did not start"
                time.sleep(0.2)
        assert ok.status_code == 200
        rebound = httpx.get(
            f"http://127.0.0.1:{port}/api/studies",
            headers={"Host": f"attacker.example:{port}"},
            trust_env=False,
        )
        assert rebound.status_code == 403
        local = httpx.get(
            f"http://127.0.0.1:{port}/api/studies", headers={"Host": f"localhost:{port}"}, trust_env=False
        )
        assert local.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_space_that_rejects_every_proposal_stops_instead_of_looping(workdir: Path, space):
    path = workdir / "closed.yaml"
    path.write_text((workdir / "small.yaml").read_text() + "constraints: [{expr: 'ep_size > 100'}]\n")
    done = tuner("search", "--space", str(path), "--budget", "3", "--quiet", "--no-annotate")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "proposals were all rejected" in done.stderr
    study = optuna.load_study(study_name="small", storage=f"sqlite:///{workdir}/studies/small.db")
    assert {t.user_attrs["outcome"] for t in study.get_trials()} == {"infeasible"}
    assert all(t.user_attrs["server_s"] == 0 for t in study.get_trials())
