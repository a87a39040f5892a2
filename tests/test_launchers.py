"""Launchers: failure classification on real SGLang log text, and the local, ssh and
systemd backends against real emulator processes.

The ssh tests run a real OpenSSH server (``/usr/sbin/sshd``, Debian package
``openssh-server``) on a loopback port. The systemd tests use a ``systemctl`` /
``journalctl`` STAND-IN (tests/standins/systemd_standin.py) because systemd is not
running in test environments; the unit files the launcher writes are checked with the
real ``systemd-analyze verify``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures_launchers import chat, emulator_spec, group_members, pid_alive, wait_until
from tuner.engines import get as get_engine
from tuner.engines.base import LaunchSpec
from tuner.failures import FAILURE_CLASSES, LaunchFailure
from tuner.launchers import BACKENDS, make_launcher
from tuner.launchers.classify import classify_failure, signal_from_shell_status
from tuner.launchers.local import LocalLauncher
from tuner.launchers.ssh import SshLauncher
from tuner.net import free_port
from tuner.transports.ssh import SshTransport

SGLANG = get_engine("sglang")

pytestmark = pytest.mark.timeout(60)


def classify(log: str, returncode: int | None = 1) -> LaunchFailure:
    return classify_failure(
        returncode=returncode,
        log_text=log,
        patterns=SGLANG.failure_patterns,
        ready_pattern=SGLANG.ready_pattern,
    )


# -- classification on SGLang's own log text -----------------------------------------------

OOM_LOG = """\
[2026-05-02 10:14:07 TP0] Load weight end. type=KimiK2ForCausalLM, dtype=torch.bfloat16, avail mem=3.21 GB, mem usage=89.87 GB.
[2026-05-02 10:14:07 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2980, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1702, in init_memory_pool
    raise RuntimeError(
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5

[2026-05-02 10:14:07] Received sigquit from a child process. It usually means the child failed.
"""

CUDA_GRAPH_OOM_LOG = """\
[2026-05-02 10:20:31 TP3] Capture cuda graph begin. This can take up to several minutes. avail mem=4.02 GB
Capturing batches (bs=256 avail_mem=3.10 GB):   4%|▍         | 2/52 [00:01<00:40,  1.22it/s]
[2026-05-02 10:20:33 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 391, in __init__
    self.capture()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 3 has a total capacity of 94.97 GiB of which 1.02 GiB is free.

During handling of the above exception, another exception occurred:

Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 3 has a total capacity of 94.97 GiB of which 1.02 GiB is free.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose
"""

ARGPARSE_LOG = """\
usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]
                        [--host HOST] [--port PORT] [--tp-size TP_SIZE]
launch_server.py: error: argument --tp-size/--tensor-parallel-size: invalid int value: 'eight'
"""

UNRECOGNIZED_LOG = """\
usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]
launch_server.py: error: unrecognized arguments: --enable-magic
"""

ASSERT_LOG = """\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/sgl-workspace/sglang/python/sglang/launch_server.py", line 11, in <module>
    server_args = prepare_server_args(sys.argv[1:])
  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 912, in __post_init__
    assert self.moe_dense_tp_size in {1, None}, "moe_dense_tp_size only support 1 and None currently"
AssertionError: moe_dense_tp_size only support 1 and None currently
"""

VALUE_ERROR_LOG = """\
Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 1320, in check_server_args
    raise ValueError("Currently speculative decoding does not support pipeline parallelism.")
ValueError: Currently speculative decoding does not support pipeline parallelism.
"""

READY = "[2026-05-02 10:31:02] The server is fired up and ready to roll!\n"

NCCL_LOG = (
    READY
    + """\
[2026-05-02 11:02:44 TP5] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py", line 2806, in all_reduce
    work = group.allreduce([tensor], opts)
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
"""
)

PORT_LOG = """\
[2026-05-02 10:40:12] INFO:     Started server process [81234]
[2026-05-02 10:40:12] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use
"""

RUNTIME_OOM_LOG = (
    READY
    + """\
[2026-05-02 11:30:01 TP0] Decode batch. #running-req: 256, #token: 401234, token usage: 0.97, gen throughput (token/s): 1502.11
[2026-05-02 11:30:02 TP0] Scheduler hit an exception: Traceback (most recent call last):
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 94.97 GiB of which 612.00 MiB is free.
"""
)


@pytest.mark.parametrize(
    ("log", "returncode", "reason", "needle"),
    [
        (OOM_LOG, -9, "oom", "Not enough memory"),
        (CUDA_GRAPH_OOM_LOG, -9, "cuda-graph-oom", "Capture cuda graph failed"),
        (ARGPARSE_LOG, 2, "invalid-args", "invalid int value"),
        (UNRECOGNIZED_LOG, 2, "invalid-args", "unrecognized arguments"),
        (ASSERT_LOG, 1, "invalid-args", "AssertionError: moe_dense_tp_size"),
        (VALUE_ERROR_LOG, 1, "invalid-args", "ValueError: Currently speculative"),
        (NCCL_LOG, -9, "crash", "NCCL"),
        (PORT_LOG, 1, "port-busy", "address already in use"),
        (RUNTIME_OOM_LOG, -9, "oom", "CUDA out of memory"),
        (READY + "[2026-05-02 12:00:00] Decode batch. #running-req: 1\n", -9, "crash", "SIGKILL"),
        ("", -15, "crash", "SIGTERM"),
        ("loading...\n", 0, "crash", "exit status 0"),
    ],
    ids=[
        "oom",
        "cuda-graph-oom",
        "argparse",
        "unrecognized",
        "assert",
        "value-error",
        "nccl",
        "port-busy",
        "runtime-oom",
        "killed",
        "terminated",
        "exit-0",
    ],
)
def test_classify_sglang_logs(log: str, returncode: int, reason: str, needle: str) -> None:
    failure = classify(log, returncode)
    assert failure.reason == reason
    assert failure.reason in FAILURE_CLASSES
    assert needle.lower() in failure.message.lower()


def test_assertion_after_ready_line_is_a_crash_not_invalid_args() -> None:
    log = READY + "Traceback (most recent call last):\nAssertionError: bad batch shape\n"
    assert classify(log, 1).reason == "crash"
    # an old startup failure before a later successful start does not count either
    assert classify(ASSERT_LOG + READY, -9).reason == "crash"


def test_shell_status_maps_to_signals() -> None:
    assert signal_from_shell_status(137) == -9
    assert signal_from_shell_status(143) == -15
    assert signal_from_shell_status(1) == 1
    assert signal_from_shell_status(2) == 2


def test_backends_and_factory() -> None:
    assert BACKENDS == ("local", "ssh", "systemd")
    assert isinstance(make_launcher("local", engine=SGLANG), LocalLauncher)
    assert isinstance(make_launcher("ssh", ssh="example-host"), SshLauncher)
    with pytest.raises(ValueError, match="unknown launcher backend"):
        make_launcher("kubernetes")
    with pytest.raises(ValueError, match="needs a host"):
        make_launcher("ssh")


# -- local ----------------------------------------------------------------------------------


def _log(tmp_path: Path, n: int = 1) -> Path:
    return tmp_path / "studies" / "demo" / f"trial-{n}.log"


def test_local_healthy_start_serves_and_stops(tmp_path: Path) -> None:
    port = free_port()
    progress: list[tuple[float, str]] = []
    # /health_generate: healthy only once a one-token generation goes through
    with LocalLauncher(SGLANG, stop_grace_s=5, health_path="/health_generate") as launcher:
        launcher.start(emulator_spec(port), log_path=_log(tmp_path), trial_label="trial-1")
        pgid = launcher.pgid
        seconds = launcher.wait_healthy(20, poll_s=0.1, on_progress=lambda t, s: progress.append((t, s)))
        assert 0.4 < seconds < 20
        assert launcher.health_url() == f"http://127.0.0.1:{port}/health_generate"
        states = [state for _, state in progress]
        assert states[-1] == "healthy"
        assert {"starting", "loading"} & set(states[:-1])  # refused, then 503 while "loading"
        assert launcher.base_url() == f"http://127.0.0.1:{port}"
        reply = chat(launcher.base_url())
        assert reply["choices"][0]["message"]["content"]
        assert launcher.alive()
        assert "fired up and ready to roll" in launcher.log_tail()
    assert not launcher.alive()
    assert wait_until(lambda: not group_members(pgid), 5), "server processes left behind"
    launcher.stop()  # idempotent


def test_local_oom_launch_is_classified_oom(tmp_path: Path) -> None:
    launcher = LocalLauncher(SGLANG)
    launcher.start(
        emulator_spec(free_port(), "--mem-fraction-static", "0.5"),
        log_path=_log(tmp_path),
        trial_label="trial-2",
    )
    with pytest.raises(LaunchFailure) as info:
        launcher.wait_healthy(20, poll_s=0.1)
    assert info.value.reason == "oom"
    assert "Not enough memory" in info.value.message
    assert "Not enough memory" in _log(tmp_path).read_text()
    assert not group_members(launcher.pgid)


def test_local_invalid_args(tmp_path: Path) -> None:
    with LocalLauncher(SGLANG) as launcher:
        launcher.start(
            emulator_spec(free_port(), "--moe-dense-tp-size", "3", "--tp-size", "8"),
            log_path=_log(tmp_path),
            trial_label="trial-3",
        )
        with pytest.raises(LaunchFailure) as info:
            launcher.wait_healthy(20, poll_s=0.1)
    assert info.value.reason == "invalid-args"
    assert "moe_dense_tp_size" in info.value.message


def test_local_port_busy_launches_nothing(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        launcher = LocalLauncher(SGLANG)
        with pytest.raises(LaunchFailure) as info:
            launcher.start(emulator_spec(port), log_path=_log(tmp_path), trial_label="trial-4")
    assert info.value.reason == "port-busy"
    assert launcher.proc is None
    assert not launcher.alive()
    assert not _log(tmp_path).exists() or _log(tmp_path).read_bytes() == b""
    launcher.stop()


def test_local_killed_mid_run_is_a_crash(tmp_path: Path) -> None:
    with LocalLauncher(SGLANG) as launcher:
        launcher.start(emulator_spec(free_port()), log_path=_log(tmp_path), trial_label="trial-5")
        launcher.wait_healthy(20, poll_s=0.1)
        pgid = launcher.pgid
        os.killpg(pgid, signal.SIGKILL)
        assert wait_until(lambda: not launcher.alive(), 5)
        failure = launcher.classify_exit()
        assert failure.reason == "crash"
        assert "SIGKILL" in failure.message
    assert not group_members(pgid)


def test_local_health_timeout_stops_the_server(tmp_path: Path) -> None:
    launcher = LocalLauncher(SGLANG, stop_grace_s=5)
    launcher.start(emulator_spec(free_port(), load_delay=60), log_path=_log(tmp_path), trial_label="trial-6")
    pgid = launcher.pgid
    began = time.monotonic()
    with pytest.raises(LaunchFailure) as info:
        launcher.wait_healthy(1.0, poll_s=0.2)
    assert info.value.reason == "timeout"
    assert time.monotonic() - began < 10
    assert not launcher.alive()
    assert not group_members(pgid), "server processes left behind"


def test_local_interrupt_during_wait_stops_the_server(tmp_path: Path) -> None:
    launcher = LocalLauncher(SGLANG, stop_grace_s=5)
    launcher.start(emulator_spec(free_port(), load_delay=60), log_path=_log(tmp_path), trial_label="trial-7")
    pgid = launcher.pgid

    def interrupt(elapsed: float, state: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launcher.wait_healthy(30, poll_s=0.1, on_progress=interrupt)
    assert not group_members(pgid)


def test_local_stop_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    script = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\ntime.sleep(60)\n"
    )
    spec = LaunchSpec(argv=[sys.executable, "-c", script, "--port", str(free_port())], engine="sglang")
    launcher = LocalLauncher(SGLANG, stop_grace_s=0.5)
    launcher.start(spec, log_path=_log(tmp_path), trial_label="trial-8")
    assert wait_until(lambda: "up" in launcher.log_tail(), 5)
    began = time.monotonic()
    launcher.stop()
    assert time.monotonic() - began < 5
    assert launcher.proc.returncode == -signal.SIGKILL


# -- ssh ------------------------------------------------------------------------------------


def test_ssh_launch_measure_stop(sshd, tmp_path: Path) -> None:
    remote_dir = str(sshd.home / "remote")
    port = free_port()
    with SshLauncher(sshd.transport(), SGLANG, remote_dir=remote_dir, stop_grace_s=5) as launcher:
        launcher.start(emulator_spec(port), log_path=_log(tmp_path), trial_label="trial-1")
        seconds = launcher.wait_healthy(30, poll_s=0.2)
        assert 0.4 < seconds < 30
        assert launcher.base_url() != f"http://127.0.0.1:{port}"  # through the ssh forward
        reply = chat(launcher.base_url())
        assert reply["usage"]["completion_tokens"] > 0
        pgid = launcher.pgid
        assert pid_alive(pgid)
        assert (Path(remote_dir) / f"tuner-{port}.pid").read_text().strip() == str(pgid)
        assert "fired up and ready to roll" in launcher.log_tail()
    assert wait_until(lambda: not group_members(pgid), 5), "remote server left behind"
    assert not (Path(remote_dir) / f"tuner-{port}.pid").exists()
    assert "fired up and ready to roll" in _log(tmp_path).read_text()  # fetched back


def test_ssh_stops_a_leftover_server_before_starting(sshd, tmp_path: Path) -> None:
    remote_dir = str(sshd.home / "remote")
    port = free_port()
    first = SshLauncher(sshd.transport(), SGLANG, remote_dir=remote_dir, stop_grace_s=5)
    first.start(emulator_spec(port), log_path=_log(tmp_path, 1), trial_label="trial-1")
    first.wait_healthy(30, poll_s=0.2)
    leftover = first.pgid
    first.tunnel.close()  # as if the tuner that started it had been killed
    second = SshLauncher(sshd.transport(), SGLANG, remote_dir=remote_dir, stop_grace_s=5)
    try:
        second.start(emulator_spec(port), log_path=_log(tmp_path, 2), trial_label="trial-2")
        assert not group_members(leftover)
        second.wait_healthy(30, poll_s=0.2)
        assert second.pgid != leftover
    finally:
        second.stop()
        first.stop()
    assert not group_members(second.pgid)


def test_two_studies_on_one_host_keep_their_own_server_logs(sshd, tmp_path: Path) -> None:
    """Trial 1 of two studies run on one host, one after the other: each trial's server log
    on the host is its own (named by the study), and the first study's local log still
    holds its own server's output after the second ran."""
    remote = tmp_path / "remote"
    logs = {name: tmp_path / "studies" / name / "trial-1.log" for name in ("chat", "batch")}
    for name, log in logs.items():
        with SshLauncher(sshd.transport(), SGLANG, remote_dir=str(remote), stop_grace_s=5) as launcher:
            launcher.start(
                emulator_spec(free_port(), "--served-model-name", name), log_path=log, trial_label="trial-1"
            )
            launcher.wait_healthy(30, poll_s=0.2)
    assert sorted(p.name for p in remote.glob("*.log")) == ["batch-trial-1.log", "chat-trial-1.log"]
    for name, log in logs.items():
        other = "batch" if name == "chat" else "chat"
        for text in (log.read_text(), (remote / f"{name}-trial-1.log").read_text()):
            assert "fired up and ready to roll" in text
            assert name in text and other not in text


def test_ssh_invalid_args_classified_from_fetched_log(sshd, tmp_path: Path) -> None:
    launcher = SshLauncher(sshd.transport(), SGLANG, remote_dir=str(sshd.home / "remote"))
    launcher.start(
        emulator_spec(free_port(), "--moe-dense-tp-size", "3", "--tp-size", "8"),
        log_path=_log(tmp_path),
        trial_label="trial-3",
    )
    with pytest.raises(LaunchFailure) as info:
        launcher.wait_healthy(30, poll_s=0.2)
    assert info.value.reason == "invalid-args"
    assert "exit status 1" in info.value.message
    assert "AssertionError" in _log(tmp_path).read_text()


def test_ssh_port_busy_on_the_remote_host(sshd, tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        launcher = SshLauncher(sshd.transport(), SGLANG, remote_dir=str(sshd.home / "remote"))
        with pytest.raises(LaunchFailure) as info:
            launcher.start(emulator_spec(port), log_path=_log(tmp_path), trial_label="trial-4")
    assert info.value.reason == "port-busy"
    assert not (sshd.home / "remote" / f"tuner-{port}.pid").exists()


def test_ssh_unreachable_host(sshd, tmp_path: Path) -> None:
    closed = free_port()
    transport = SshTransport(
        "127.0.0.1",
        port=closed,
        connect_timeout_s=3,
        control_dir=sshd.control_dir,
        options=["UserKnownHostsFile=/dev/null", "StrictHostKeyChecking=no"],
    )
    launcher = SshLauncher(transport, SGLANG)
    with pytest.raises(LaunchFailure) as info:
        launcher.start(emulator_spec(free_port()), log_path=_log(tmp_path), trial_label="trial-5")
    assert info.value.reason == "unreachable"
    assert "refused" in info.value.message
    launcher.stop()


# -- systemd (systemctl/journalctl STAND-IN; real systemd-analyze) ----------------------------


def _verify_unit(path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is missing (Debian package: systemd)")
    done = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert (done.stdout + done.stderr).strip() == "", done.stdout + done.stderr


def test_systemd_unit_lifecycle(systemd_standin, tmp_path: Path) -> None:
    port = free_port()
    spec = emulator_spec(
        port, "--max-running-requests", "256", env={"NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": "16"}
    )
    unit_dir = str(systemd_standin.unit_dir)
    with make_launcher("systemd", engine=SGLANG, unit_dir=unit_dir, stop_grace_s=5) as launcher:
        launcher.start(spec, log_path=_log(tmp_path), trial_label="trial-1")
        unit_file = systemd_standin.unit_dir / f"tuner-{port}.service"
        assert unit_file.exists()
        text = unit_file.read_text()
        assert 'Environment="NCCL_MAX_NCHANNELS=16"' in text
        assert "Restart=no" in text  # a failing trial fails once
        assert f"--port {port}" in text
        _verify_unit(unit_file)
        seconds = launcher.wait_healthy(30, poll_s=0.2)
        assert seconds > 0.4
        assert launcher.base_url() == f"http://127.0.0.1:{port}"
        assert chat(launcher.base_url())["choices"]
        pid = int((systemd_standin.state_dir / f"tuner-{port}.service.pid").read_text())
        assert pid_alive(pid)
        assert os.environ.get("NCCL_MAX_NCHANNELS") is None
        assert "fired up and ready to roll" in launcher.log_tail()
    assert wait_until(lambda: not pid_alive(pid), 5)
    assert "fired up and ready to roll" in _log(tmp_path).read_text()


def test_systemd_failed_unit_classified_from_journal(systemd_standin, tmp_path: Path) -> None:
    launcher = make_launcher("systemd", engine=SGLANG, unit_dir=str(systemd_standin.unit_dir))
    launcher.start(
        emulator_spec(free_port(), "--mem-fraction-static", "0.5"),
        log_path=_log(tmp_path),
        trial_label="trial-2",
    )
    with pytest.raises(LaunchFailure) as info:
        launcher.wait_healthy(30, poll_s=0.2)
    assert info.value.reason == "oom"
    assert "exit status 1" in info.value.message
    assert "Not enough memory" in _log(tmp_path).read_text()


def test_systemd_port_busy(systemd_standin, tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        launcher = make_launcher("systemd", engine=SGLANG, unit_dir=str(systemd_standin.unit_dir))
        with pytest.raises(LaunchFailure) as info:
            launcher.start(emulator_spec(port), log_path=_log(tmp_path), trial_label="trial-3")
    assert info.value.reason == "port-busy"
    assert not (systemd_standin.unit_dir / f"tuner-{port}.service").exists()


def test_systemd_over_ssh(sshd, systemd_standin, tmp_path: Path) -> None:
    """The unit written, reloaded, restarted, read and stopped on the far side of ssh."""
    port = free_port()
    launcher = make_launcher(
        "systemd",
        engine=SGLANG,
        ssh=sshd.transport(),
        unit_dir=str(systemd_standin.unit_dir),
        systemctl=str(systemd_standin.systemctl),
        journalctl=str(systemd_standin.journalctl),
        stop_grace_s=5,
    )
    with launcher:
        launcher.start(emulator_spec(port), log_path=_log(tmp_path), trial_label="trial-4")
        unit_file = systemd_standin.unit_dir / f"tuner-{port}.service"
        _verify_unit(unit_file)
        launcher.wait_healthy(30, poll_s=0.2)
        assert launcher.base_url() != f"http://127.0.0.1:{port}"  # through the ssh forward
        assert chat(launcher.base_url())["choices"]
        pid = int((systemd_standin.state_dir / f"tuner-{port}.service.pid").read_text())
    assert wait_until(lambda: not pid_alive(pid), 5)
    assert "fired up and ready to roll" in _log(tmp_path).read_text()


def test_ssh_interpreter_is_resolved_on_the_host(sshd, tmp_path: Path) -> None:
    """The unit for an ssh trial names the interpreter the host's PATH gives, which is not the
    tuner's own (this test's sshd runs commands with the system's default PATH)."""
    transport = sshd.transport()
    remote = transport.run("command -v python3").stdout.decode().strip()
    assert remote.startswith("/") and remote != sys.executable
    launcher = SshLauncher(transport, SGLANG, remote_dir=str(sshd.home / "remote"))
    launcher.spec = LaunchSpec(argv=["python3", "-m", "sglang.launch_server"], env={}, engine="sglang")
    assert launcher.interpreter() == remote
    launcher.spec = LaunchSpec(argv=["/opt/venv/bin/python3", "-m", "x"], env={}, engine="sglang")
    assert launcher.interpreter() == "/opt/venv/bin/python3"
    launcher.spec = LaunchSpec(argv=["vllm", "serve"], env={}, engine="vllm")
    assert launcher.interpreter() is None
    launcher.close()


def test_setup_errors_blame_the_host_not_the_configuration() -> None:
    missing = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'sglang'\n"
    failure = classify_failure(returncode=1, log_text=missing, patterns=SGLANG.failure_patterns)
    assert failure.reason == "setup" and "No module named 'sglang'" in failure.message
    driver = "RuntimeError: The NVIDIA driver on your system is too old (found version 11040)\n"
    driver += "CUDA driver version is insufficient for CUDA runtime version\n"
    assert classify_failure(returncode=1, log_text=driver).reason == "setup"
    # A GPU failure says more than a stray missing file earlier in the same log.
    nccl = "open /etc/nccl.conf: No such file or directory\n...\nNCCL error: unhandled system error\n"
    assert classify_failure(returncode=1, log_text=nccl).reason == "crash"
