"""The emulator's HTTP application: SGLang's and OpenAI's endpoints over the realtime engine.

:class:`Emulator` is an ASGI app serving ``/health``, ``/health_generate``,
``/server_info``, ``/model_info``, ``/v1/models``, ``/v1/chat/completions``, ``/generate``
and ``/flush_cache`` with SGLang's bodies, status codes and error shapes; each generation
request is a :class:`~tuner.sim.realtime.Generation` of the engine, streamed as
server-sent events as its tokens are released.

Starlette carries the routes: the stack SGLang itself uses, so clients see the same
framing, and fast enough. The generation endpoints bypass Starlette's middleware and
``StreamingResponse`` and write ASGI messages directly: ~70 us of CPU per chunk
(uvicorn's h11 and the socket write are most of it), i.e. one core streams ~15-20k
chunks/s, measured with one token per chunk by ``benchmarks/loadgen_ceiling.py``. The
engine coalesces tokens so that the chunk rate stays below ``--max-chunks-per-s`` (5k/s
by default) whatever the speedup, so a plain-asyncio HTTP server would buy nothing a test
or a study needs. The process around it (flags, loading, signals) is
:mod:`tuner.sim.server`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tuner.sim.faults import MID_STREAM_BYTES, Faults
from tuner.sim.model import PerfModel
from tuner.sim.realtime import GREEDY, SEEDED, Generation, RealtimeEngine
from tuner.trace import CHARS_PER_TOKEN

#: max_tokens when a request sets none (SGLang: up to the context length; the natural
#: reply length ends it long before).
DEFAULT_MAX_TOKENS = 16384
#: SGLang's /generate default max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 128
#: Prompt length estimate: English text averages ~4 characters per token; the chat
#: template adds role markers per message.
TEMPLATE_TOKENS_PER_MESSAGE = 6
#: EOS id reported as ``matched_stop`` (Kimi K2's <|im_end|>; informative only).
EOS_TOKEN_ID = 163586
#: Tokens of the emulated replies: fixed-width (4 characters) so that the text of tokens
#: ``a..b`` is a slice, and free of characters JSON would escape.
_BASE_TEXT = (
    " the and for you can was are but not all one new use how may way"
    " its two any set run key top big low few own end far yes per via"
)
_WORDS = len(_BASE_TEXT) // 4
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


def token_text(a: int, b: int) -> str:
    """Text of output tokens ``a`` (inclusive) to ``b`` (exclusive) of a reply."""
    n = b - a
    if n <= 0:
        return ""
    off = (a % _WORDS) * 4
    reps = (off + 4 * n) // len(_BASE_TEXT) + 1
    return (_BASE_TEXT * reps)[off : off + 4 * n]


def estimate_prompt_tokens(texts: Sequence[str], messages: int = 0) -> int:
    chars = sum(len(t) for t in texts)
    return max(1, math.ceil(chars / CHARS_PER_TOKEN) + TEMPLATE_TOKENS_PER_MESSAGE * messages)


def reply_key(sampling: dict, prompt: Any) -> tuple[int, int] | None:
    """What decides a request's reply (see :meth:`RealtimeEngine.submit`): for a greedy
    request (temperature 0), a digest of its prompt; else its sampling ``seed`` where it
    gives one; else nothing (sampled at the model's default: drawn anew per request).
    ``sampling`` holds validated sampling parameters (:func:`_check_sampling`)."""
    temperature, seed = sampling.get("temperature"), sampling.get("seed")
    if temperature is not None and temperature <= 0:
        digest = hashlib.blake2b(json.dumps(prompt, sort_keys=True).encode(), digest_size=8).digest()
        return GREEDY, int.from_bytes(digest, "big")
    return None if seed is None else (SEEDED, seed)


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
        fault: bytes | None = None,
    ):
        self.emu, self.gen, self.head, self.render, self.tail = emu, gen, head, render, tail
        #: Bytes that replace the second half of the stream (an injected fault), or None.
        self.fault = fault

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
                if self.fault is not None and sent and sent >= gen.target // 2:
                    await send({"type": "http.response.body", "body": self.fault, "more_body": False})
                    return
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
        faults: Faults | None = None,
    ):
        self.perf = perf
        self.faults = faults
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
        fault = self.faults.next() if self.faults is not None else None
        if fault in ("http-429", "http-500"):
            return _error(int(fault.removeprefix("http-")), f"injected fault {fault}")
        prompt = estimate_prompt_tokens(texts, len(messages))
        if prompt > self.perf.memory.kv_tokens:
            return _error(
                400,
                f"The input ({prompt} tokens) is longer than the KV cache "
                f"({self.perf.memory.kv_tokens} tokens).",
            )
        gen = self.engine.submit(
            prompt,
            max_tokens,
            ignore_eos=bool(body.get("ignore_eos", False)),
            reply=reply_key(body, messages),
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

        return _EventStream(  # type: ignore[return-value]
            self, gen, head, render, tail, MID_STREAM_BYTES.get(fault) if fault else None
        )

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
            prompt,
            max_new,
            ignore_eos=bool(sp.get("ignore_eos", False)),
            reply=reply_key(sp, text if isinstance(text, str) else ids),
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
