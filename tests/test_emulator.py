"""The SGLang-compatible emulator, as a real process over real HTTP on loopback.

Every server here is started with ``EmulatorProcess`` (its own process group, a free
port) and stopped by process group in a fixture or ``finally``. Speedups are high and
replies short, so the module runs in seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tuner.net import free_port
from tuner.sim.emulator_app import token_text
from tuner.sim.emulator_process import EmulatorProcess
from tuner.sim.server import READY_LINE

TP8 = ["--tp-size", "8"]
#: Requests finish in milliseconds at this speedup (a decode step of ~10 ms becomes 0.1 ms).
FAST = 100.0


@pytest.fixture(scope="module")
def emu():
    with EmulatorProcess(TP8, speedup=FAST) as proc:
        yield proc


def _client(emu: EmulatorProcess) -> httpx.Client:
    return httpx.Client(base_url=emu.url, timeout=20.0, trust_env=False)


def _chat(max_tokens: int = 12, **extra) -> dict:
    body = {
        "model": "x",
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": max_tokens,
    }
    body.update(extra)
    return body


def _sse_events(lines: list[str]) -> list:
    events = []
    for line in lines:
        if not line:
            continue
        assert line.startswith("data: "), line
        payload = line[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def _run_emulator(*args: str, timeout: float = 30.0, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m tuner.sim.server`` to completion (for launches that must fail)."""
    return subprocess.run(
        [sys.executable, "-m", "tuner.sim.server", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


# --- start-up ----------------------------------------------------------------------------------
def test_health_goes_refused_then_503_then_200():
    proc = EmulatorProcess(TP8, speedup=FAST, options=["--load-delay", "1.2"])
    proc.start()
    try:
        states: list[object] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                state: object = httpx.get(proc.url + "/health", timeout=1.0, trust_env=False).status_code
            except httpx.ConnectError:
                state = "refused"
            if not states or states[-1] != state:
                states.append(state)
            if state == 200:
                break
            time.sleep(0.02)
        assert states == ["refused", 503, 200]
        assert httpx.get(proc.url + "/health_generate", timeout=5, trust_env=False).status_code == 200
        log = proc.log()
        assert READY_LINE in log
        assert "KV Cache is allocated" in log
    finally:
        assert proc.stop() == 0  # SIGTERM is a clean exit
    assert "Traceback" not in proc.log()


def test_generation_refused_while_loading():
    proc = EmulatorProcess(TP8, speedup=FAST, options=["--load-delay", "3"])
    proc.start()
    try:
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            try:
                status = httpx.post(
                    proc.url + "/v1/chat/completions", json=_chat(), timeout=2, trust_env=False
                )
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        assert status is not None and status.status_code == 503
        assert httpx.get(proc.url + "/health_generate", timeout=2, trust_env=False).status_code == 503
    finally:
        proc.stop()


# --- launch failures ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "status", "wording"),
    [
        (["--tp-size", "8", "--ep-size", "3"], 1, "must be divisible by ep_size"),
        (
            ["--tp-size", "8", "--mem-fraction-static", "0.5"],
            1,
            "Not enough memory. Please try to increase --mem-fraction-static",
        ),
        (["--tp-size", "8", "--mem-fraction-static", "0.95"], 1, "Capture cuda graph failed"),
        (["--tp-size", "eight"], 2, "invalid int value: 'eight'"),
        (
            ["--tp-size", "8", "--moe-dense-tp-size", "2"],
            1,
            "moe_dense_tp_size only supports None, 1, or tp_size",
        ),
    ],
)
def test_refused_launches_fail_like_sglang(flags, status, wording):
    port = free_port()
    done = _run_emulator("--", *flags, "--port", str(port))
    assert done.returncode == status, done.stderr
    assert wording in done.stderr
    assert READY_LINE not in done.stderr + done.stdout
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1, trust_env=False)


def test_unknown_profile_is_usage_error():
    done = _run_emulator("--hardware", "no-such-host", "--", *TP8)
    assert done.returncode == 2
    assert "unknown hardware profile" in done.stderr


def test_port_in_use(emu):
    done = _run_emulator("--", *TP8, "--port", str(emu.port))
    assert done.returncode == 1
    assert "Address already in use" in done.stderr


def test_fail_after_crashes_with_nonzero_status():
    proc = EmulatorProcess(TP8, speedup=FAST, env={"TUNER_EMULATOR_FAIL_AFTER_S": "1.5"})
    proc.start()
    try:
        proc.wait_ready()
        assert proc.proc is not None
        assert proc.proc.wait(timeout=10) == 1
        assert "emulated crash" in proc.log()
    finally:
        proc.stop()


# --- endpoints ---------------------------------------------------------------------------------
def test_info_endpoints(emu):
    with _client(emu) as c:
        info = c.get("/server_info").json()
        assert c.get("/get_server_info").json()["tp_size"] == 8
        assert info["tp_size"] == 8 and info["label"] == "TP8"
        assert info["memory"]["kv_tokens"] == info["max_total_num_tokens"] > 0
        assert info["internal_states"][0]["max_running_requests"] >= 1
        assert info["emulator"]["speedup"] == FAST
        models = c.get("/v1/models").json()
        assert models["object"] == "list" and models["data"][0]["id"]
        assert c.get("/model_info").json()["is_generation"] is True
        assert c.post("/flush_cache").status_code == 200
        assert c.get("/no-such-endpoint").status_code == 404


def test_chat_stream_shapes(emu):
    body = _chat(
        20, stream=True, stream_options={"include_usage": True}, ignore_eos=True, temperature=0.7, seed=3
    )
    with _client(emu) as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(list(r.iter_lines()))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(e["object"] == "chat.completion.chunk" for e in chunks)
    assert len({e["id"] for e in chunks}) == 1
    first = chunks[0]["choices"][0]
    assert first["delta"]["role"] == "assistant" and first["delta"]["content"] == ""
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 20
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 20
    final = chunks[-2]["choices"][0]
    assert final["finish_reason"] == "length"
    content = [e["choices"][0]["delta"]["content"] for e in chunks[1:-2]]
    assert all(content) and all(e["choices"][0]["finish_reason"] is None for e in chunks[1:-2])
    assert "".join(content) == token_text(0, 20)


def test_chat_stream_without_usage_and_max_completion_tokens(emu):
    body = _chat(stream=True, max_completion_tokens=7, ignore_eos=True)
    del body["max_tokens"]
    with _client(emu) as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        events = _sse_events(list(r.iter_lines()))
    assert events[-1] == "[DONE]"
    assert all(e["usage"] is None for e in events[:-1])
    text = "".join(e["choices"][0]["delta"]["content"] for e in events[:-1])
    assert text == token_text(0, 7)


def test_chat_non_stream(emu):
    with _client(emu) as c:
        r = c.post("/v1/chat/completions", json=_chat(9, ignore_eos=True))
    out = r.json()
    assert r.status_code == 200 and out["object"] == "chat.completion"
    choice = out["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"] == token_text(0, 9)
    assert choice["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 9


def test_natural_reply_lengths_stop_on_their_own(emu):
    with _client(emu) as c:
        outs = [c.post("/v1/chat/completions", json=_chat(100_000, seed=s)).json() for s in range(3)]
    lengths = [o["usage"]["completion_tokens"] for o in outs]
    assert all(o["choices"][0]["finish_reason"] == "stop" for o in outs)
    assert all(100 < n < 20_000 for n in lengths) and len(set(lengths)) == 3
    # The same seed gives the same length.
    with _client(emu) as c:
        again = c.post("/v1/chat/completions", json=_chat(100_000, seed=1)).json()
    assert again["usage"]["completion_tokens"] == lengths[1]


def test_a_greedy_reply_depends_on_its_prompt_not_on_arrival_order(emu):
    def length(content: str, **extra) -> int:
        body = {"model": "x", "messages": [{"role": "user", "content": content}], "max_tokens": 100_000}
        with _client(emu) as c:
            return c.post("/v1/chat/completions", json={**body, **extra}).json()["usage"]["completion_tokens"]

    prompts = [f"Question {i}: tell me about serving." for i in range(4)]
    first = [length(p, temperature=0) for p in prompts]
    again = [length(p, temperature=0) for p in reversed(prompts)][::-1]
    assert first == again and len(set(first)) == 4
    # Sampled decoding (no temperature: the model's default) draws each reply anew.
    sampled = {length(prompts[0]) for _ in range(3)}
    assert len(sampled) == 3


def test_generate_native(emu):
    with _client(emu) as c:
        r = c.post(
            "/generate", json={"text": "Hello", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
        )
        out = r.json()
        assert out["text"] == token_text(0, 5)
        assert out["meta_info"]["completion_tokens"] == 5
        assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
        body = {"text": "Hello", "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}, "stream": True}
        with c.stream("POST", "/generate", json=body) as s:
            events = _sse_events(list(s.iter_lines()))
    assert events[-1] == "[DONE]"
    assert events[-2]["text"] == token_text(0, 6) and events[-2]["meta_info"]["completion_tokens"] == 6
    assert [e["meta_info"]["completion_tokens"] for e in events[:-1]] == sorted(
        e["meta_info"]["completion_tokens"] for e in events[:-1]
    )


@pytest.mark.parametrize(
    ("path", "payload", "wording"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 2}, "n > 1"),
        ("/v1/chat/completions", {"messages": []}, "messages"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "temperature": -1},
            "temperature",
        ),
        ("/v1/chat/completions", b"{not json", "invalid JSON"),
        ("/generate", {"sampling_params": {}}, "text or input_ids"),
        ("/generate", {"text": ["a", "b"]}, "batched"),
    ],
)
def test_bad_requests_are_400(emu, path, payload, wording):
    with _client(emu) as c:
        if isinstance(payload, bytes):
            r = c.post(path, content=payload, headers={"content-type": "application/json"})
        else:
            r = c.post(path, json=payload)
    assert r.status_code == 400
    assert wording in r.json()["message"]


def test_client_disconnect_leaves_the_batch(emu):
    with _client(emu) as c:
        before = c.get("/server_info").json()["emulator"]
        body = _chat(50_000, stream=True, ignore_eos=True)
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            for seen, _line in enumerate(r.iter_lines()):
                if seen >= 5:
                    break
        # The connection is closed; the engine drops the request at its next boundary.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            after = c.get("/server_info").json()["emulator"]
            if after["open_requests"] == 0:
                break
            time.sleep(0.05)
    assert after["open_requests"] == 0
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["output_tokens"] - before["output_tokens"] < 50_000
    assert "Traceback" not in emu.log() and "ERROR" not in emu.log()


def test_many_open_streams(emu):
    """A thousand concurrent streams, all answered, accounting exact, the batch full. Each
    stream is long enough (96 tokens) to still be running while the client opens the rest:
    at 24 tokens the first ones finished before the 256th arrived on a loaded 2-core
    machine (228 running at most), and the test measured the client's speed, not the
    server's batching."""
    from tuner.loadgen import run_level
    from tuner.metrics import summarize
    from tuner.workload import Workload

    wl = Workload(levels=(1000,), max_tokens=96, ignore_eos=True)
    with _client(emu) as c:
        before = c.get("/server_info").json()["emulator"]
        level = asyncio.run(asyncio.wait_for(run_level(emu.url, wl, 1000, model_name="x"), 60))
        after = c.get("/server_info").json()["emulator"]
    m = summarize(level)
    assert m.completed == 1000 and not m.errors
    assert m.output_tokens == 96_000 == after["output_tokens"] - before["output_tokens"]
    assert after["max_running"] >= 256


def test_sigterm_during_streams_exits_cleanly():
    proc = EmulatorProcess(TP8, speedup=1.0)
    with (
        proc,
        _client(proc) as c,
        c.stream("POST", "/v1/chat/completions", json=_chat(10_000, stream=True)) as r,
    ):
        lines = r.iter_lines()
        next(lines)
        assert proc.proc is not None
        os.killpg(proc.proc.pid, signal.SIGTERM)
        assert proc.proc.wait(timeout=10) == 0
    assert "Traceback" not in proc.log()


def test_nccl_environment_reaches_the_model():
    with EmulatorProcess(TP8, speedup=FAST, env={"NCCL_PROTO": "Simple"}) as proc:
        nccl = httpx.get(proc.url + "/server_info", timeout=10, trust_env=False).json()["nccl"]
    assert nccl["protocols"] == ["Simple"]


def test_tuner_emulate_command():
    port = free_port()
    argv = [sys.executable, "-m", "tuner", "emulate", "--speedup", "50", "--", *TP8, "--port", str(port)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if (
                    httpx.get(f"http://127.0.0.1:{port}/health", timeout=1, trust_env=False).status_code
                    == 200
                ):
                    break
            except httpx.ConnectError:
                time.sleep(0.05)
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions", json=_chat(5, ignore_eos=True), timeout=10
        )
        assert r.json()["usage"]["completion_tokens"] == 5
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0
    failed = subprocess.run(
        [sys.executable, "-m", "tuner", "emulate", "--", *TP8, "--mem-fraction-static", "0.5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert failed.returncode == 1 and "Not enough memory" in failed.stderr
