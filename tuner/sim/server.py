"""An SGLang-compatible HTTP server backed by the performance model: the emulator.

``python -m tuner.sim.server --hardware ID --model ID [--speedup K] -- <SGLang flags>``
(or ``tuner emulate ...``) behaves, over HTTP, like ``python -m sglang.launch_server``
with those flags on that host: it refuses the launch with SGLang's message when the
flags or the memory plan are invalid, "loads" for a while (the port refuses
connections, then ``/health`` answers 503), logs SGLang's ready line, and then serves
the OpenAI chat API and SGLang's native endpoints, streaming tokens at the pace the
model predicts (divided by ``--speedup``). The load generator, the launchers and the
whole study can therefore be exercised end to end without a GPU.

Starlette and uvicorn carry the HTTP side: the stack SGLang itself uses, so clients see
the same framing, and fast enough. The generation endpoints bypass Starlette's
middleware and ``StreamingResponse`` and write ASGI messages directly: ~70 us of CPU
per chunk (uvicorn's h11 and the socket write are most of it), i.e. one core streams
~15-20k chunks/s, measured with one token per chunk by ``benchmarks/loadgen_ceiling.py``.
The engine coalesces tokens so that the chunk rate stays below ``--max-chunks-per-s``
(5k/s by default) whatever the speedup, so a plain-asyncio HTTP server would buy
nothing a test or a study needs. The batching itself is
:class:`tuner.sim.realtime.RealtimeEngine`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tuner import profiles
from tuner.failures import LaunchFailure
from tuner.sim.model import PerfModel
from tuner.sim.realtime import (
    DEFAULT_CHUNK_INTERVAL_S,
    DEFAULT_MAX_CHUNKS_PER_S,
    Generation,
    RealtimeEngine,
)

#: SGLang's ready line; launchers wait for it.
READY_LINE = "The server is fired up and ready to roll!"
#: Environment variable: crash (exit 1) this many seconds after start (fault injection).
FAIL_AFTER_ENV = "TUNER_EMULATOR_FAIL_AFTER_S"
DEFAULT_HARDWARE = "rtx-pro-6000-pcie-x8"
DEFAULT_MODEL = "kimi-k2.6"
#: max_tokens when a request sets none (SGLang: up to the context length; the natural
#: reply length ends it long before).
DEFAULT_MAX_TOKENS = 16384
#: SGLang's /generate default max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 128
#: Prompt length estimate: English text averages ~4 characters per token; the chat
#: template adds role markers per message.
CHARS_PER_TOKEN = 4.0
TEMPLATE_TOKENS_PER_MESSAGE = 6
#: EOS id reported as ``matched_stop`` (Kimi K2's <|im_end|>; informative only).
EOS_TOKEN_ID = 163586
#: Tokens of the emulated replies: fixed-width (4 characters) so that the text of tokens
#: ``a..b`` is a slice, and free of characters JSON would escape.
_WORDS = (
    " the",
    " and",
    " for",
    " you",
    " can",
    " was",
    " are",
    " but",
    " not",
    " all",
    " one",
    " new",
    " use",
    " how",
    " may",
    " way",
    " its",
    " two",
    " any",
    " set",
    " run",
    " key",
    " top",
    " big",
    " low",
    " few",
    " own",
    " end",
    " far",
    " yes",
    " per",
    " via",
)
_BASE_TEXT = "".join(_WORDS)
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


def token_text(a: int, b: int) -> str:
    """Text of output tokens ``a`` (inclusive) to ``b`` (exclusive) of a reply."""
    n = b - a
    if n <= 0:
        return ""
    off = (a % len(_WORDS)) * 4
    reps = (off + 4 * n) // len(_BASE_TEXT) + 1
    return (_BASE_TEXT * reps)[off : off + 4 * n]


def estimate_prompt_tokens(texts: Sequence[str], messages: int = 0) -> int:
    chars = sum(len(t) for t in texts)
    return max(1, math.ceil(chars / CHARS_PER_TOKEN) + TEMPLATE_TOKENS_PER_MESSAGE * messages)


def log(message: str) -> None:
    """One log line in SGLang's format, on stderr (where SGLang's logger writes)."""
    sys.stderr.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def _error(status: int, message: str) -> JSONResponse:
    """An OpenAI-style error body, as SGLang's ``create_error_response`` writes it."""
    kind = "BadRequestError" if status == 400 else "ServiceUnavailableError" if status == 503 else "Error"
    return JSONResponse(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status},
        status_code=status,
    )


class _BadRequest(Exception):
    pass


def _int_field(body: dict, *names: str, default: int | None = None, minimum: int = 1) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise _BadRequest(f"{name} must be an integer, got {value!r}")
        if value < minimum:
            raise _BadRequest(f"{name} must be at least {minimum}, got {value}")
        return value
    return default


def _check_sampling(body: dict) -> None:
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or temperature < 0):
        raise _BadRequest(f"temperature must be a non-negative number, got {temperature!r}")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _BadRequest(f"seed must be an integer, got {seed!r}")


class _EventStream:
    """ASGI response that streams one engine request as server-sent events.

    ``render(sent, visible)`` gives the bytes of the chunk carrying tokens
    ``sent..visible``; ``tail()`` the bytes after the last one (finish chunk, usage,
    ``[DONE]``). A client that disconnects cancels the request in the engine.
    """

    def __init__(
        self,
        emu: Emulator,
        gen: Generation,
        head: bytes,
        render: Callable[[int, int], bytes],
        tail: Callable[[], bytes],
    ):
        self.emu, self.gen, self.head, self.render, self.tail = emu, gen, head, render, tail

    async def __call__(self, scope: Any, receive: Callable, send: Callable) -> None:
        engine, gen = self.emu.engine, self.gen
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        # The body has been read: receive() now returns only when the client goes away
        # (or the response completes).
        watcher = asyncio.ensure_future(receive())
        watcher.add_done_callback(lambda _f: engine.cancel(gen))
        try:
            if self.head:
                await send({"type": "http.response.body", "body": self.head, "more_body": True})
            sent = 0
            while True:
                v = gen.visible
                if v > sent:
                    await send(
                        {"type": "http.response.body", "body": self.render(sent, v), "more_body": True}
                    )
                    sent = v
                    continue
                if gen.cancelled or gen.done:
                    break
                gen.event.clear()
                await gen.event.wait()
            if not gen.cancelled:
                await send({"type": "http.response.body", "body": self.tail(), "more_body": False})
            elif self.emu.closing:
                # Shutting down: end the HTTP response (the stream has no [DONE]) so the
                # server can close the connection without cancelling this task.
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            engine.cancel(gen)


class Emulator:
    """The HTTP application: routes, start-up state and the engine."""

    def __init__(
        self,
        perf: PerfModel,
        *,
        hardware: str,
        model: str,
        served_model_name: str,
        speedup: float,
        seed: int,
        noise: float,
        chunk_interval_s: float,
        max_chunks_per_s: float,
    ):
        self.perf = perf
        self.hardware = hardware
        self.model = model
        self.served_model_name = served_model_name
        self.engine = RealtimeEngine(
            perf,
            speedup=speedup,
            seed=seed,
            noise=noise,
            chunk_interval_s=chunk_interval_s,
            max_chunks_per_s=max_chunks_per_s,
        )
        self.ready = False
        self.closing = False
        self.started = time.time()
        self.app = Starlette(
            routes=[
                Route("/health", self.health, methods=["GET", "POST"]),
                Route("/health_generate", self.health_generate, methods=["GET", "POST"]),
                Route("/server_info", self.server_info, methods=["GET"]),
                Route("/get_server_info", self.server_info, methods=["GET"]),
                Route("/model_info", self.model_info, methods=["GET"]),
                Route("/get_model_info", self.model_info, methods=["GET"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/generate", self.generate, methods=["POST"]),
                Route("/flush_cache", self.flush_cache, methods=["GET", "POST"]),
            ]
        )
        #: Generation endpoints skip Starlette's middleware (two exception wrappers around every
        #: ``send``), the largest per-chunk cost of the stack after h11 and the syscall.
        self._fast = {
            ("POST", "/v1/chat/completions"): self.chat_completions,
            ("POST", "/generate"): self.generate,
        }

    async def __call__(self, scope: Any, receive: Callable, send: Callable) -> None:
        """The ASGI entry point."""
        if scope["type"] == "http":
            handler = self._fast.get((scope["method"], scope["path"]))
            if handler is not None:
                response = await handler(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def shutdown(self) -> None:
        """Stop serving: health turns 503 and every open request ends (streams without
        ``[DONE]``, as when a real server goes away)."""
        self.ready = False
        self.closing = True
        self.engine.cancel_all()

    # --- status endpoints ---------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return Response(status_code=200 if self.ready else 503)

    async def health_generate(self, request: Request) -> Response:
        """SGLang runs a one-token generation through the scheduler; so does the emulator."""
        if not self.ready:
            return Response(status_code=503)
        gen = self.engine.submit(1, 1, ignore_eos=True)
        try:
            while not (gen.done or gen.cancelled):
                gen.event.clear()
                await gen.event.wait()
        finally:
            self.engine.cancel(gen)
        return Response(status_code=503 if gen.cancelled else 200)

    def server_info_dict(self) -> dict[str, Any]:
        pm, mem = self.perf, self.perf.memory
        info: dict[str, Any] = asdict(pm.args)
        info.update(
            {
                "served_model_name": self.served_model_name,
                "label": pm.args.label(),
                "max_total_num_tokens": mem.kv_tokens,
                # SGLang 0.5.23 nests the resolved graph limits; an explicit decode limit is
                # reported as asked (the simulator's memory plan caps it at the running batch).
                "cuda_graph_config": {
                    "decode": {
                        "backend": "full" if pm.args.cuda_graph_enabled else "disabled",
                        "max_bs": pm.args.cuda_graph_max_bs or mem.cuda_graph_max_bs,
                    }
                },
                "memory": mem.as_dict(),
                "internal_states": [
                    {
                        "max_total_num_tokens": mem.kv_tokens,
                        "max_running_requests": mem.max_running_requests,
                        "chunked_prefill_size": mem.chunked_prefill_size,
                        "cuda_graph_max_bs": mem.cuda_graph_max_bs,
                    }
                ],
                "version": "emulated",
                "nccl": pm.server_info().get("nccl") if hasattr(pm, "server_info") else None,
                "emulator": {
                    "hardware": self.hardware,
                    "model": self.model,
                    "speedup": self.engine.speedup,
                    "seed": self.engine.seed,
                    "noise": self.engine.noise,
                    "ready": self.ready,
                    "open_requests": self.engine.open_requests,
                    **self.engine.stats.as_dict(),
                },
            }
        )
        return info

    async def server_info(self, request: Request) -> Response:
        return JSONResponse(self.server_info_dict())

    async def model_info(self, request: Request) -> Response:
        return JSONResponse(
            {
                "model_path": self.served_model_name,
                "tokenizer_path": self.served_model_name,
                "is_generation": True,
                "preferred_sampling_params": None,
            }
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.served_model_name,
                        "object": "model",
                        "created": int(self.started),
                        "owned_by": "sglang",
                        "root": self.served_model_name,
                    }
                ],
            }
        )

    async def flush_cache(self, request: Request) -> Response:
        return Response(
            "Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n",
            media_type="text/plain",
        )

    # --- generation -----------------------------------------------------------------------
    async def _json_body(self, request: Request) -> dict:
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            raise _BadRequest(f"invalid JSON body: {exc}") from exc
        if not isinstance(body, dict):
            raise _BadRequest("the request body must be a JSON object")
        return body

    async def _wait_done(self, gen: Generation, request: Request) -> None:
        """Wait for a non-streamed reply; a client that goes away cancels it."""
        watcher = asyncio.ensure_future(request.receive())
        watcher.add_done_callback(lambda _f: self.engine.cancel(gen))
        try:
            while not (gen.done or gen.cancelled):
                gen.event.clear()
                await gen.event.wait()
        finally:
            watcher.cancel()
            self.engine.cancel(gen)

    async def chat_completions(self, request: Request) -> Response:
        if not self.ready:
            return _error(503, "The server is not ready yet.")
        try:
            body = await self._json_body(request)
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _BadRequest("messages must be a non-empty list")
            texts = []
            for m in messages:
                content = m.get("content") if isinstance(m, dict) else None
                if isinstance(content, str):
                    texts.append(content)
                elif isinstance(content, list):
                    texts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
                elif content is not None:
                    raise _BadRequest("message content must be a string or a list of parts")
            n = _int_field(body, "n", default=1)
            if n != 1:
                raise _BadRequest("n > 1 is not supported by this server")
            max_tokens = _int_field(body, "max_completion_tokens", "max_tokens", default=DEFAULT_MAX_TOKENS)
            _check_sampling(body)
            stream_options = body.get("stream_options") or {}
            if not isinstance(stream_options, dict):
                raise _BadRequest("stream_options must be an object")
        except _BadRequest as exc:
            return _error(400, str(exc))
        assert max_tokens is not None
        prompt = estimate_prompt_tokens(texts, len(messages))
        if prompt > self.perf.memory.kv_tokens:
            return _error(
                400,
                f"The input ({prompt} tokens) is longer than the KV cache "
                f"({self.perf.memory.kv_tokens} tokens).",
            )
        gen = self.engine.submit(
            prompt, max_tokens, ignore_eos=bool(body.get("ignore_eos", False)), seed=body.get("seed")
        )
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        model = json.dumps(str(body.get("model") or self.served_model_name))
        if not body.get("stream"):
            await self._wait_done(gen, request)
            if gen.cancelled:
                return (
                    _error(503, "The server is shutting down.") if self.closing else Response(status_code=499)
                )
            return JSONResponse(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": json.loads(model),
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": token_text(0, gen.target),
                                "reasoning_content": None,
                                "tool_calls": None,
                            },
                            "logprobs": None,
                            "finish_reason": gen.finish_reason,
                            "matched_stop": EOS_TOKEN_ID if gen.finish_reason == "stop" else None,
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": gen.target,
                        "total_tokens": prompt + gen.target,
                    },
                }
            )
        pre = f'data: {{"id":"{cid}","object":"chat.completion.chunk","created":{created},"model":{model},'
        head = (
            pre + '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            '"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
        ).encode()
        mid = pre + '"choices":[{"index":0,"delta":{"role":"assistant","content":"'
        end = '"},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
        include_usage = bool(stream_options.get("include_usage"))

        def render(a: int, b: int) -> bytes:
            return (mid + token_text(a, b) + end).encode()

        def tail() -> bytes:
            reason = gen.finish_reason
            stop = EOS_TOKEN_ID if reason == "stop" else "null"
            out = (
                pre + '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
                f'"finish_reason":"{reason}","matched_stop":{stop}}}],"usage":null}}\n\n'
            )
            if include_usage:
                out += (
                    pre + '"choices":[],"usage":{'
                    f'"prompt_tokens":{prompt},"completion_tokens":'
                    f'{gen.visible},"total_tokens":{prompt + gen.visible}}}}}\n\n'
                )
            return (out + "data: [DONE]\n\n").encode()

        return _EventStream(self, gen, head, render, tail)  # type: ignore[return-value]

    async def generate(self, request: Request) -> Response:
        """SGLang's native ``/generate``: ``text`` + ``meta_info``; streamed text is cumulative."""
        if not self.ready:
            return _error(503, "The server is not ready yet.")
        try:
            body = await self._json_body(request)
            text, ids = body.get("text"), body.get("input_ids")
            if isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list)):
                raise _BadRequest("batched /generate requests are not supported by this server")
            if isinstance(text, str):
                prompt = estimate_prompt_tokens([text])
            elif isinstance(ids, list) and ids:
                prompt = len(ids)
            else:
                raise _BadRequest("either text or input_ids must be provided")
            sp = body.get("sampling_params") or {}
            if not isinstance(sp, dict):
                raise _BadRequest("sampling_params must be an object")
            max_new = _int_field(sp, "max_new_tokens", default=DEFAULT_MAX_NEW_TOKENS)
            _check_sampling(sp)
        except _BadRequest as exc:
            return _error(400, str(exc))
        assert max_new is not None
        gen = self.engine.submit(
            prompt, max_new, ignore_eos=bool(sp.get("ignore_eos", False)), seed=sp.get("seed")
        )
        rid = uuid.uuid4().hex
        t0 = time.perf_counter()

        def meta(tokens: int, final: bool) -> dict[str, Any]:
            reason = None
            if final:
                reason = (
                    {"type": "length", "length": tokens}
                    if gen.finish_reason == "length"
                    else {"type": "stop", "matched": EOS_TOKEN_ID}
                )
            return {
                "id": rid,
                "finish_reason": reason,
                "prompt_tokens": prompt,
                "completion_tokens": tokens,
                "cached_tokens": 0,
                "e2e_latency": time.perf_counter() - t0,
            }

        if not body.get("stream"):
            await self._wait_done(gen, request)
            if gen.cancelled:
                return (
                    _error(503, "The server is shutting down.") if self.closing else Response(status_code=499)
                )
            return JSONResponse({"text": token_text(0, gen.target), "meta_info": meta(gen.target, True)})

        def render(a: int, b: int) -> bytes:
            return (
                "data: " + json.dumps({"text": token_text(0, b), "meta_info": meta(b, False)}) + "\n\n"
            ).encode()

        def tail() -> bytes:
            v = gen.visible
            return (
                "data: "
                + json.dumps({"text": token_text(0, v), "meta_info": meta(v, True)})
                + "\n\ndata: [DONE]\n\n"
            ).encode()

        return _EventStream(self, gen, b"", render, tail)  # type: ignore[return-value]


# --- process ----------------------------------------------------------------------------------
class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the emulator owns SIGTERM/SIGINT so that it
    exits with status 0 instead of re-raising the signal after shutdown."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
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


def _sglang_flag(argv: Sequence[str], *names: str) -> str | None:
    value = None
    for i, word in enumerate(argv):
        for name in names:
            if word == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif word.startswith(name + "="):
                value = word.split("=", 1)[1]
    return value


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
    served = _sglang_flag(sglang_argv, "--served-model-name") or args.model_path or ns.model
    log(f"server_args={args!r}")
    log(f"Load weight end. mem usage={mem.weights_gib_per_gpu:.2f} GB.")
    log(f"KV Cache is allocated. #tokens: {mem.kv_tokens}, KV size: {mem.kv_pool_gib:.2f} GB")
    if mem.requested_max_running_requests and mem.requested_max_running_requests > mem.max_running_requests:
        log(
            f"max_running_requests was reduced from the requested {mem.requested_max_running_requests} to "
            f"{mem.max_running_requests} to fit the KV cache."
        )
    log(
        f"max_total_num_tokens={mem.kv_tokens}, chunked_prefill_size={mem.chunked_prefill_size}, "
        f"max_running_requests={mem.max_running_requests}, cuda_graph_max_bs={mem.cuda_graph_max_bs}"
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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to port 0 and release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EmulatorProcess:
    """The emulator as a child process in its own process group, on a loopback port.

    For tests and benchmarks: ``with EmulatorProcess(["--tp-size", "8"], speedup=50) as emu:
    ... emu.url ...``. The log (stdout and stderr) goes to a temporary file, read with
    :meth:`log`; :meth:`stop` sends SIGTERM to the group, then SIGKILL if it lingers.
    """

    def __init__(
        self,
        sglang_flags: Sequence[str] = (),
        *,
        options: Sequence[str] = (),
        speedup: float = 1.0,
        port: int | None = None,
        host: str = "127.0.0.1",
        env: dict[str, str] | None = None,
    ):
        self.host = host
        self.port = port or free_port(host)
        self.argv = [
            sys.executable,
            "-m",
            "tuner.sim.server",
            "--speedup",
            str(speedup),
            *options,
            "--",
            *sglang_flags,
            "--host",
            host,
            "--port",
            str(self.port),
        ]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._final_log = ""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmulatorProcess:
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        return self

    def log(self) -> str:
        """Everything the process wrote so far (kept after :meth:`__exit__`)."""
        if self._log is None or self._log.closed:
            return self._final_log
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait for ``/health`` to answer 200; raises RuntimeError (with the log) if the
        process exits or the time runs out."""
        import httpx

        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"emulator exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"emulator not healthy after {timeout_s} s:\n{self.log()}")

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``timeout_s``; returns the exit status.
        The log stays readable with :meth:`log`."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._log is not None and not self._log.closed:
            self._final_log = self.log()
            self._log.close()
        return proc.returncode

    def __enter__(self) -> EmulatorProcess:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
