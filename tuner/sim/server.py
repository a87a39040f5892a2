"""An SGLang-compatible HTTP server backed by the performance model: the emulator.

``python -m tuner.sim.server --hardware ID --model ID [--speedup K] -- <SGLang flags>``
(or ``tuner emulate ...``) behaves, over HTTP, like ``python -m sglang.launch_server``
with those flags on that host: it refuses the launch with SGLang's message when the
flags or the memory plan are invalid, "loads" for a while (the port refuses
connections, then ``/health`` answers 503), logs SGLang's ready line, and then serves
the OpenAI chat API and SGLang's native endpoints, streaming tokens at the pace the
model predicts (divided by ``--speedup``). The load generator, the launchers and the
whole study can therefore be exercised end to end without a GPU.

This module is the process: its options, the launch checks and log lines, the loading
phase, the uvicorn server and the signals. The HTTP application is
:mod:`tuner.sim.emulator_app`, the batching :class:`tuner.sim.realtime.RealtimeEngine`,
and :mod:`tuner.sim.emulator_process` starts this module as a child process for tests
and benchmarks (re-exported here, where callers have long imported it from).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Generator, Sequence

import uvicorn

from tuner import profiles
from tuner.failures import LaunchFailure
from tuner.net import free_port
from tuner.sim.emulator_app import Emulator, token_text
from tuner.sim.emulator_process import EmulatorProcess
from tuner.sim.faults import FAULT_ENV, Faults
from tuner.sim.model import PerfModel
from tuner.sim.realtime import DEFAULT_CHUNK_INTERVAL_S, DEFAULT_MAX_CHUNKS_PER_S

__all__ = ["READY_LINE", "EmulatorProcess", "add_arguments", "free_port", "main", "run", "token_text"]

#: SGLang's ready line; launchers wait for it.
READY_LINE = "The server is fired up and ready to roll!"
#: Environment variable: crash (exit 1) this many seconds after start (fault injection).
FAIL_AFTER_ENV = "TUNER_EMULATOR_FAIL_AFTER_S"
DEFAULT_HARDWARE = "rtx-pro-6000-pcie-x8"
DEFAULT_MODEL = "kimi-k2.6"


def log(message: str) -> None:
    """One log line in SGLang's format, on stderr (where SGLang's logger writes)."""
    sys.stderr.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}\n")
    sys.stderr.flush()


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the emulator owns SIGTERM/SIGINT so that it
    exits with status 0 instead of re-raising the signal after shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The emulator's own options (SGLang's launch flags follow ``--``)."""
    parser.add_argument(
        "--hardware",
        default=DEFAULT_HARDWARE,
        help=f"hardware profile id or YAML path (default: {DEFAULT_HARDWARE})",
    )
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help=f"model profile id or YAML path (default: {DEFAULT_MODEL})"
    )
    parser.add_argument(
        "--speedup",
        type=float,
        default=1.0,
        help="run K times faster than the modelled host (default 1: real time)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of reply lengths and noise")
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="relative per-step timing noise and per-launch factor (default 0)",
    )
    parser.add_argument(
        "--load-delay",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds of emulated model loading: the port refuses connections for the "
        "first half, /health answers 503 for the second (default 0)",
    )
    parser.add_argument(
        "--fail-after",
        type=float,
        default=None,
        metavar="S",
        help=f"crash (exit 1) S seconds after start (also env {FAIL_AFTER_ENV})",
    )
    parser.add_argument(
        "--chunk-ms",
        type=float,
        default=DEFAULT_CHUNK_INTERVAL_S * 1e3,
        help="shortest real time between two chunks of one stream; shorter steps are "
        "coalesced (default %(default)s)",
    )
    parser.add_argument(
        "--max-chunks-per-s",
        type=float,
        default=DEFAULT_MAX_CHUNKS_PER_S,
        help="cap on SSE chunks per second over all streams; 0 = no cap (default %(default)s)",
    )


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``[emulator options] -- [SGLang flags]``."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _report_failure(exc: LaunchFailure) -> int:
    """Die as SGLang does: argparse errors with usage and status 2, the rest with a
    traceback-shaped report and status 1."""
    if exc.message.startswith("sglang serve: error:"):
        sys.stderr.write(f"usage: sglang serve [-h] [--model-path MODEL_PATH] [options]\n{exc.message}\n")
        return 2
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "sglang/launch_server.py", line 14, in <module>\n'
        "    launch_server(server_args)\n"
        f"{exc.message}\n"
    )
    return 1


async def _serve(ns: argparse.Namespace, sglang_argv: list[str]) -> int:
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fail_after = ns.fail_after
    if fail_after is None and os.environ.get(FAIL_AFTER_ENV):
        try:
            fail_after = float(os.environ[FAIL_AFTER_ENV])
        except ValueError:
            sys.stderr.write(f"error: {FAIL_AFTER_ENV} must be a number of seconds\n")
            return 2
    try:
        faults = Faults.parse(os.environ.get(FAULT_ENV))
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    if fail_after is not None:

        def crash() -> None:
            log(
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                f"RuntimeError: emulated crash after {fail_after:g} s ({FAIL_AFTER_ENV} / --fail-after)"
            )
            os._exit(1)

        loop.call_later(max(0.0, fail_after), crash)

    try:
        perf = PerfModel.build(ns.hardware, ns.model, sglang_argv, dict(os.environ))
    except LaunchFailure as exc:
        return _report_failure(exc)
    args, mem = perf.args, perf.memory
    served = args.served_model_name or args.model_path or ns.model
    log(f"server_args={args!r}")
    log(f"Load weight end. mem usage={mem.weights_gib_per_gpu:.2f} GB.")
    log(f"KV Cache is allocated. #tokens: {mem.kv_tokens}, KV size: {mem.kv_pool_gib:.2f} GB")
    if mem.cuda_graph_gib:
        log(
            f"Capture target decode CUDA graph end. elapsed={time.monotonic() - started:.2f} s, "
            f"mem usage={mem.cuda_graph_gib:.2f} GB, avail mem={mem.available_gib:.2f} GB."
        )
    if mem.requested_max_running_requests and mem.requested_max_running_requests > mem.max_running_requests:
        log(
            f"max_running_requests was reduced from the requested {mem.requested_max_running_requests} to "
            f"{mem.max_running_requests} to fit the KV cache."
        )
    log(
        f"max_total_num_tokens={mem.kv_tokens}, chunked_prefill_size={mem.chunked_prefill_size}, "
        f"max_running_requests={mem.max_running_requests}, cuda_graph_max_bs={mem.cuda_graph_max_bs}, "
        f"available_gpu_mem={mem.available_gib:.2f} GB"
    )

    emu = Emulator(
        perf,
        hardware=ns.hardware,
        model=ns.model,
        served_model_name=served,
        speedup=ns.speedup,
        seed=ns.seed,
        noise=ns.noise,
        chunk_interval_s=max(0.0, ns.chunk_ms) / 1e3,
        max_chunks_per_s=ns.max_chunks_per_s,
        faults=faults,
    )

    async def wait_or_stop(seconds: float) -> bool:
        """Sleep; True when a stop signal came first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, seconds))
        return stop.is_set()

    # Loading, first half: nothing listens yet.
    if await wait_or_stop(ns.load_delay / 2):
        return 0
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(4096)
        sock.setblocking(False)
    except OSError as exc:
        log(
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{args.host}', {args.port}): {exc.strerror}"
        )
        sys.stderr.write(f"OSError: [Errno {exc.errno}] {exc.strerror}\n")
        return 1
    config = uvicorn.Config(
        emu,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        timeout_keep_alive=30,
        backlog=4096,
    )
    server = _Server(config)
    engine_task = asyncio.create_task(emu.engine.run(), name="scheduler")
    server_task = asyncio.create_task(server.serve(sockets=[sock]), name="http")
    try:
        log(f"Uvicorn running on http://{args.host}:{args.port} (loading)")
        if not await wait_or_stop(ns.load_delay - ns.load_delay / 2):
            emu.ready = True
            log(READY_LINE)
            waiter = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait(
                {waiter, server_task, engine_task}, return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            for task in done:
                if task is not waiter and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        log("Shutting down.")
        emu.shutdown()
        await asyncio.sleep(0.05)  # let the open streams end their responses
        server.should_exit = True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server_task, timeout=5)
        return 0
    finally:
        engine_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await engine_task
        sock.close()


def run(ns: argparse.Namespace, sglang_argv: Sequence[str]) -> int:
    """Run the emulator until SIGTERM/SIGINT; returns the exit status."""
    if ns.speedup <= 0:
        sys.stderr.write("error: --speedup must be positive\n")
        return 2
    try:
        profiles.hardware(ns.hardware)
        profiles.model(ns.model)
    except profiles.ProfileError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return asyncio.run(_serve(ns, list(sglang_argv)))


def main(argv: Sequence[str] | None = None) -> int:
    own, sglang_argv = split_argv(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m tuner.sim.server",
        description="SGLang-compatible emulator: serves the OpenAI and SGLang HTTP APIs at the pace of "
        "the performance model. Usage: [options] -- <SGLang launch flags, incl. --host/--port>",
    )
    add_arguments(parser)
    ns, extra = parser.parse_known_args(own)
    return run(ns, [*extra, *sglang_argv])


if __name__ == "__main__":
    sys.exit(main())
