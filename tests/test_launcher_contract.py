"""The launcher contract: one suite of behaviours every backend must show, run over each.

Each test takes the ``launcher`` fixture, parametrized over the backends: ``local`` (a
child process), ``ssh`` (a real OpenSSH server on loopback) and ``systemd`` (the
``systemctl``/``journalctl`` STAND-IN of tests/standins, as systemd does not run in test
environments). The server is the SGLang emulator, fast enough that a launch takes about
a second. A new backend joins by adding a case to :func:`launcher`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures_launchers import chat, emulator_spec, wait_until
from tests.helpers import emulator_pids
from tuner.engines import get as get_engine
from tuner.failures import LaunchFailure
from tuner.launchers import BACKENDS, Launcher, make_launcher
from tuner.net import free_port
from tuner.sim.server import FAIL_AFTER_ENV

SGLANG = get_engine("sglang")

pytestmark = pytest.mark.timeout(60)

#: SGLang's ready line, as the emulator prints it.
READY = "fired up and ready to roll"


@pytest.fixture(params=BACKENDS)
def launcher(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Launcher]:
    """A launcher of each backend for the SGLang engine, stopped after the test."""
    options = {"engine": SGLANG, "stop_grace_s": 5}
    if request.param == "ssh":
        sshd = request.getfixturevalue("sshd")
        options |= {"ssh": sshd.transport(), "remote_dir": str(tmp_path / "remote")}
    elif request.param == "systemd":
        options |= {"unit_dir": str(request.getfixturevalue("systemd_standin").unit_dir)}
    with make_launcher(request.param, **options) as launcher:
        yield launcher


def _log(tmp_path: Path) -> Path:
    return tmp_path / "studies" / "contract" / "trial-1.log"


def test_starts_serves_and_stops_leaving_no_process(launcher: Launcher, tmp_path: Path) -> None:
    port = free_port()
    launcher.start(emulator_spec(port), log_path=_log(tmp_path), trial_label="trial-1")
    seconds = launcher.wait_healthy(30, poll_s=0.2)
    assert seconds > 0
    assert launcher.alive()
    assert chat(launcher.base_url())["choices"][0]["message"]["content"]
    assert READY in launcher.log_tail()
    assert emulator_pids(port)
    launcher.stop()
    assert not launcher.alive()
    assert wait_until(lambda: not emulator_pids(port), 5), "server processes left behind"
    assert READY in _log(tmp_path).read_text()  # the log stays readable after the stop
    launcher.stop()  # idempotent


def test_a_server_that_fails_to_start_is_classified_and_gone(launcher: Launcher, tmp_path: Path) -> None:
    port = free_port()
    launcher.start(
        emulator_spec(port, "--mem-fraction-static", "0.5"), log_path=_log(tmp_path), trial_label="trial-1"
    )
    with pytest.raises(LaunchFailure) as info:
        launcher.wait_healthy(30, poll_s=0.2)
    assert info.value.reason == "oom"
    assert "Not enough memory" in info.value.message
    assert "Not enough memory" in _log(tmp_path).read_text()
    assert not launcher.alive()
    assert wait_until(lambda: not emulator_pids(port), 5)


def test_a_server_that_dies_while_serving_is_a_crash(launcher: Launcher, tmp_path: Path) -> None:
    port = free_port()
    spec = emulator_spec(port, env={FAIL_AFTER_ENV: "1.5"})
    launcher.start(spec, log_path=_log(tmp_path), trial_label="trial-1")
    launcher.wait_healthy(30, poll_s=0.2)
    assert wait_until(lambda: not launcher.alive(), 20, step_s=0.2)
    failure = launcher.classify_exit()
    assert failure.reason == "crash"
    assert "emulated crash" in failure.message
    assert "trial-1" in failure.message


def test_a_busy_port_launches_nothing(launcher: Launcher, tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(LaunchFailure) as info:
            launcher.start(emulator_spec(port), log_path=_log(tmp_path), trial_label="trial-1")
    assert info.value.reason == "port-busy"
    assert not launcher.alive()
    assert not emulator_pids(port)
