"""The HTTP load generator: against the emulator (a real process on loopback) for
measurements, and against tiny misbehaving servers written here for failures.

Every level is bounded (a few requests, timeouts of a second or two) and every test is
bounded in time by ``asyncio.wait_for``; failures must come back as per-level error
counts, never as a hang or an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import numpy as np
import pytest

from tuner.loadgen import (
    ClientSet,
    Timeouts,
    chat_prompt,
    measure,
    run_level,
    run_sweep,
    warm_up,
)
from tuner.metrics import LevelMetrics, summarize
from tuner.net import free_port
from tuner.sim.model import PerfModel
from tuner.sim.server import EmulatorProcess
from tuner.sim.serving import simulate_sweep
from tuner.workload import Workload

TP8 = ["--tp-size", "8"]
SHORT = Timeouts(connect_s=2.0, read_s=1.0, request_s=3.0)
#: For servers that never finish a request.
IMPATIENT = Timeouts(connect_s=1.0, read_s=0.5, request_s=1.0)


def burst(c: int, max_tokens: int = 16, **kw) -> Workload:
    return Workload(kind="burst", levels=(c,), max_tokens=max_tokens, single_max_tokens=max_tokens, **kw)


def run(coro: Awaitable, timeout: float = 30.0):
    """Run a coroutine with a hard time limit (a hang fails the test instead of blocking it)."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="module")
def emu():
    with EmulatorProcess(TP8, speedup=100.0) as proc:
        yield proc


def _stats(url: str) -> dict:
    return httpx.get(url + "/server_info", timeout=10, trust_env=False).json()["emulator"]


# --- tiny misbehaving servers -----------------------------------------------------------------
Respond = Callable[[asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length) if length else b""


@contextlib.asynccontextmanager
async def bad_server(respond: Respond) -> AsyncIterator[str]:
    """An HTTP server on a loopback port that answers every request with ``respond``."""
    tasks: set[asyncio.Task] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                await _read_request(reader)
                await respond(writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(content: str | None = None, usage: int | None = None, role: bool = False) -> bytes:
    obj: dict = {"object": "chat.completion.chunk", "choices": []}
    if content is not None:
        delta = {"role": "assistant", "content": content} if role else {"content": content}
        obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": usage, "total_tokens": 5 + usage}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _500(w: asyncio.StreamWriter) -> None:
    w.write(
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: 16\r\n\r\n"
        b'{"error":"boom"}'
    )
    await w.drain()


async def _garbage(w: asyncio.StreamWriter) -> None:
    w.write(SSE_HEAD + b"this is not server-sent events\n<html>oops</html>\n")
    await w.drain()
    raise ConnectionError  # close


async def _bad_json(w: asyncio.StreamWriter) -> None:
    w.write(SSE_HEAD + _event("hi") + b'data: {"choices": [{"delta":\n\n' + b"data: [DONE]\n\n")
    await w.drain()
    raise ConnectionError


async def _cut_chunked(w: asyncio.StreamWriter) -> None:
    """Chunked stream that stops mid-body (the server died)."""
    w.write(CHUNKED_HEAD + _chunk(_event("", role=True)) + _chunk(_event(" a")) + _chunk(_event(" b")))
    await w.drain()
    raise ConnectionError


async def _no_done(w: asyncio.StreamWriter) -> None:
    """A complete HTTP response whose SSE stream never says [DONE]."""
    w.write(SSE_HEAD + _event(" a") + _event(" b"))
    await w.drain()
    raise ConnectionError


async def _silent(w: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


async def _trickle(w: asyncio.StreamWriter) -> None:
    w.write(CHUNKED_HEAD)
    while True:
        w.write(_chunk(_event(" x")))
        await w.drain()
        await asyncio.sleep(0.2)


async def _error_event(w: asyncio.StreamWriter) -> None:
    w.write(SSE_HEAD + b'data: {"object": "error", "message": "out of memory", "code": 500}\n\n')
    await w.drain()
    raise ConnectionError


@pytest.mark.parametrize(
    ("respond", "kind"),
    [
        (_500, "http-500"),
        (_garbage, "bad-sse"),
        (_bad_json, "bad-sse"),
        (_cut_chunked, "incomplete-stream"),
        (_no_done, "incomplete-stream"),
        (_silent, "read-timeout"),
        (_trickle, "timeout"),
        (_error_event, "server-error"),
    ],
)
@pytest.mark.parametrize("fast", [True, False], ids=["fast-transport", "httpx-transport"])
def test_bad_servers_give_per_level_error_counts(respond, kind, fast):
    async def go() -> list[LevelMetrics]:
        async with bad_server(respond) as url:
            seen: list[LevelMetrics] = []
            wl = Workload(levels=(1, 4), max_tokens=8, warmup_requests=0)
            await run_sweep(url, wl, timeouts=IMPATIENT, on_level=seen.append, model_name="m", fast=fast)
            return seen

    t0 = time.monotonic()
    levels = run(go())
    assert time.monotonic() - t0 < 20
    assert [(m.concurrency, m.completed, m.failed, m.errors) for m in levels] == [
        (1, 0, 1, {kind: 1}),
        (4, 0, 4, {kind: 4}),
    ]


@pytest.mark.parametrize("fast", [True, False], ids=["fast-transport", "httpx-transport"])
def test_unreachable_url(fast):
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    levels = measure(url, Workload(levels=(1, 32), max_tokens=8), timeouts=SHORT, fast=fast)
    assert time.monotonic() - t0 < 10
    assert [summarize(lv).errors for lv in levels] == [{"connect": 1}, {"connect": 32}]
    assert all(summarize(lv).output_tok_s == 0 for lv in levels)


def test_failing_server_ends_closed_loop_early():
    url = f"http://127.0.0.1:{free_port()}"
    wl = Workload(kind="closed-loop", levels=(8,), duration_s=60, ramp_s=0.1, max_tokens=8)
    t0 = time.monotonic()
    level = run(run_level(url, wl, 8, model_name="m", timeouts=SHORT))
    assert time.monotonic() - t0 < 10
    m = summarize(level)
    assert m.completed == 0 and set(m.errors) == {"connect"}


def test_usage_and_chunk_counting():
    """Tokens come from usage when the server sends it (several tokens per chunk), else
    from content chunks; the first token is the first non-empty content delta."""

    async def with_usage(w: asyncio.StreamWriter) -> None:
        w.write(SSE_HEAD + _event("", role=True))
        await w.drain()
        await asyncio.sleep(0.2)
        w.write(
            _event(" a b c")
            + _event(" d e f")
            + _event(" g h i")
            + _event(None, usage=9)
            + b"data: [DONE]\n\n"
        )
        await w.drain()
        raise ConnectionError

    async def without_usage(w: asyncio.StreamWriter) -> None:
        w.write(
            SSE_HEAD
            + b": keep-alive comment\n\n"
            + _event("", role=True)
            + b"".join(_event(f" t{i}") for i in range(5))
            + b"data: [DONE]\n\n"
        )
        await w.drain()
        raise ConnectionError

    async def go(respond: Respond):
        async with bad_server(respond) as url:
            return await run_level(url, burst(1), 1, model_name="m", timeouts=SHORT)

    rec = run(go(with_usage)).records[0]
    assert rec.ok and rec.output_tokens == 9 and rec.prompt_tokens == 5
    assert rec.token_times is not None and len(rec.token_times) == 3
    assert rec.first_token is not None and rec.first_token - rec.start >= 0.19
    rec = run(go(without_usage)).records[0]
    assert rec.ok and rec.output_tokens == 5 and len(rec.token_times) == 5


# --- against the emulator ---------------------------------------------------------------------
def test_sweep_records_and_early_stop(emu):
    seen: list[int] = []

    async def on_level(m: LevelMetrics) -> bool:
        seen.append(m.concurrency)
        return m.concurrency < 8  # "prune" after the second level

    wl = Workload(levels=(1, 8, 16), max_tokens=32, single_max_tokens=16, ignore_eos=True)
    levels = run(run_sweep(emu.url, wl, on_level=on_level))
    assert seen == [1, 8] and [lv.concurrency for lv in levels] == [1, 8]
    m1, m8 = (summarize(lv) for lv in levels)
    assert m1.output_tokens == 16 and m8.output_tokens == 8 * 32 and not m8.errors
    rec = levels[1].records[0]
    assert rec.start < rec.first_token <= rec.token_times[-1] <= rec.end
    assert np.all(np.diff(rec.token_times) >= 0)
    assert m8.ttft_s_p50 is not None and m8.itl_ms_p50 is not None and m8.tpot_ms_mean is not None


def test_closed_loop_window(emu):
    wl = Workload(kind="closed-loop", levels=(4,), duration_s=1.0, ramp_s=0.2, max_tokens=64, ignore_eos=True)
    level = run(run_level(emu.url, wl, 4, model_name="m"))
    assert level.ended - level.started == pytest.approx(1.0, abs=0.01)
    assert level.window and level.records
    # Every record streamed inside the window; the ones that finished there are "completed",
    # the ones cut when it closed count their tokens but are no failure.
    for r in level.records:
        assert r.token_times is not None and r.token_times[-1] >= level.started
        assert r.token_times[0] <= level.ended
    finished = [r for r in level.records if r.ok and level.started <= r.end <= level.ended]
    m = summarize(level)
    assert m.completed == len(finished) and not m.errors and m.failed == 0
    assert m.wall_s == pytest.approx(1.0, abs=0.01)


def test_a_request_set_gets_the_same_replies_on_every_run(emu):
    # The load generator asks for greedy decoding (as sglang.bench_serving does), so a
    # reply is a function of its prompt: the same request set served again, by the same
    # server or a fresh one, gets replies of the same lengths; another request set others.
    wl = burst(8, max_tokens=4000)

    def lengths(url: str, seed: int) -> list[int]:
        level = run(run_level(url, wl, 8, model_name="m", seed=seed))
        assert all(r.ok for r in level.records)
        return sorted(r.output_tokens for r in level.records)

    first = lengths(emu.url, 0)
    assert len(set(first)) > 4  # natural lengths, not the cap
    assert lengths(emu.url, 0) == first
    with EmulatorProcess(TP8, speedup=100.0) as fresh:
        assert lengths(fresh.url, 0) == first
    assert lengths(emu.url, 1) != first


def test_poisson_open_loop(emu):
    wl = Workload(kind="poisson", levels=(20,), duration_s=1.0, rate=1.0, max_tokens=16, ignore_eos=True)
    level = run(run_level(emu.url, wl, 20, model_name="m"))
    m = summarize(level)
    assert 5 <= m.completed <= 50 and not m.errors  # ~20 arrivals in 1 s
    starts = sorted(r.start for r in level.records)
    assert starts[-1] - starts[0] > 0.3  # spread over the window, not a burst


def test_prompts_differ_at_the_start_and_have_the_asked_length():
    rng = np.random.default_rng(0)
    short = [chat_prompt(rng, i, None) for i in range(50)]
    assert len({p[:16] for p in short}) == 50
    long = chat_prompt(rng, 0, 1000)
    assert 3800 <= len(long) <= 4300  # ~4 characters per token


def test_client_set_reuses_connections(emu):
    async def go() -> int:
        async with ClientSet(emu.url) as clients:
            await warm_up(clients, Workload(levels=(1,), warmup_requests=2))
            for _ in range(2):
                await run_level(clients, burst(8, ignore_eos=True), 8, model_name="m")
            return clients.size

    assert run(go()) == 8


def test_server_killed_mid_sweep():
    """The server crashes during the sweep: the level in flight reports broken streams, the
    following ones connection errors, and the sweep ends promptly."""
    with EmulatorProcess(TP8, speedup=4.0, env={"TUNER_EMULATOR_FAIL_AFTER_S": "4"}) as proc:
        wl = Workload(levels=(4, 8, 16, 32, 48), max_tokens=400, ignore_eos=True, warmup_requests=0)
        t0 = time.monotonic()
        levels = [summarize(lv) for lv in run(run_sweep(proc.url, wl, timeouts=SHORT, model_name="m"), 60)]
        assert time.monotonic() - t0 < 30
        assert proc.proc is not None and proc.proc.wait(5) == 1
    kinds = set().union(*(m.errors for m in levels))
    # A dying server under CPU pressure can also stall a request past its short timeout.
    assert kinds <= {
        "incomplete-stream",
        "connect",
        "disconnected",
        "timeout",
        "read-timeout",
        "connect-timeout",
    }
    assert any("incomplete-stream" in m.errors for m in levels)
    assert levels[-1].errors == {"connect": 48}


# --- measurement agreement --------------------------------------------------------------------
def test_measurement_matches_emulator_and_simulator():
    """Measured tok/s agrees with the emulator's own accounting (2%) and with the simulator's
    prediction times the speedup (5%); token counts agree exactly."""
    speedup = 5.0
    wl = Workload(levels=(1, 32), max_tokens=384, single_max_tokens=160, ignore_eos=True)
    model = PerfModel.build("rtx-pro-6000-pcie-x8", "kimi-k2.6", TP8, {})
    predicted = [summarize(lv) for lv in simulate_sweep(model, wl, seed=0, noise=0)]

    async def go(url: str) -> list[tuple[LevelMetrics, dict]]:
        out = []
        async with ClientSet(url) as clients:
            await warm_up(clients, wl, model_name="m")
            for c in wl.levels:
                before = _stats(url)
                level = await run_level(clients, wl, c, model_name="m")
                after = _stats(url)
                out.append(
                    (
                        summarize(level),
                        {k: after[k] - before[k] for k in after if isinstance(after[k], int | float)},
                    )
                )
        return out

    with EmulatorProcess(TP8, speedup=speedup) as proc:
        measured = run(go(proc.url), 60)
    for sim, (m, acct) in zip(predicted, measured, strict=True):
        assert not m.errors
        assert m.output_tokens == acct["output_tokens"] == sim.output_tokens
        emulator_tok_s = acct["output_tokens"] / acct["busy_wall_s"]
        assert m.output_tok_s == pytest.approx(emulator_tok_s, rel=0.02), (m.concurrency, acct)
        assert m.output_tok_s == pytest.approx(sim.output_tok_s * speedup, rel=0.05), m.concurrency


def test_bench_cli(emu):
    base = [
        sys.executable,
        "-m",
        "tuner",
        "bench",
        "--url",
        emu.url,
        "--levels",
        "1,8",
        "--max-tokens",
        "24",
        "--single-max-tokens",
        "16",
        "--ignore-eos",
    ]
    before = _stats(emu.url)
    done = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=60)
    after = _stats(emu.url)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "ok" and out["server"]["tp_size"] == 8
    assert [lv["concurrency"] for lv in out["levels"]] == [1, 8]
    tokens = sum(lv["output_tokens"] for lv in out["levels"])
    assert tokens == 16 + 8 * 24
    warmup = Workload().warmup_max_tokens * Workload().warmup_requests
    assert after["output_tokens"] - before["output_tokens"] == tokens + warmup

    table = subprocess.run(base, capture_output=True, text=True, timeout=60)
    lines = table.stdout.splitlines()
    assert table.returncode == 0 and lines[0] == "=== TP8 ==="
    assert lines[1].startswith("  C=1: ") and lines[1].endswith(" tok/s")
    assert lines[2].startswith("  C=  8: ") and " wall=" in lines[2]

    bad = subprocess.run([*base[:4], "--url", "localhost:1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--url" in bad.stderr
    bad = subprocess.run([*base, "--levels", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2


def test_bench_cli_unreachable():
    url = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "bench", "--url", url, "--levels", "1,4", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    out = json.loads(done.stdout)
    assert out["status"] == "failed" and out["reason"] == "unreachable"
    assert [lv["errors"] for lv in out["levels"]] == [{"connect": 1}, {"connect": 4}]
    assert "Traceback" not in done.stderr


def test_httpx_transport_measures_the_same(emu):
    """httpx's default transport (used for https) streams and counts exactly like the fast one."""
    wl = burst(8, max_tokens=40, ignore_eos=True)
    fast, stock = (summarize(run(run_level(emu.url, wl, 8, model_name="m", fast=f))) for f in (True, False))
    assert fast.output_tokens == stock.output_tokens == 8 * 40
    assert fast.completed == stock.completed == 8 and not fast.errors and not stock.errors
