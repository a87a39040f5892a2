"""HTTP load generator: measures a concurrency sweep against an OpenAI-compatible server.

Each request streams ``/v1/chat/completions`` with ``stream_options.include_usage`` and
becomes a :class:`~tuner.records.RequestRecord`: start, first token (the first
*non-empty* content delta: SGLang and vLLM open with an empty role chunk), one
timestamp per content chunk, output tokens (``usage.completion_tokens``, or the count
of content chunks when the server sends no usage), end, and an error class. The
records of a level go to :func:`tuner.metrics.summarize`, the one metrics code shared
with the simulator.

Workloads (:class:`~tuner.workload.Workload`):

* ``burst``: C requests at once; the level's wall runs from the first send to the last
  finish.
* ``closed-loop``: C clients each keep one request in flight; clients start staggered
  over ``ramp_s``; the level's wall is the ``duration_s`` window after the ramp and only
  requests that finish inside it count.
* ``poisson``: open loop, ``max(1, rate * C * duration_s)`` requests with exponential
  inter-arrival times at ``rate * C`` requests/s; every request counts; the wall runs
  from the start to the last finish.

Failures never escape a level: an unreachable server, HTTP errors, malformed SSE and
streams that end without ``[DONE]`` become per-request error classes (``connect``,
``http-500``, ``bad-sse``, ``incomplete-stream``, ``read-timeout``, ``timeout`` ...),
which :func:`~tuner.metrics.summarize` counts per level.

Cost (``benchmarks/loadgen_ceiling.py``, C=256, one token per SSE chunk, a 2-core machine
with the emulator on the other core): the default :class:`FastTransport` measures
21k tok/s within 1.1% of the server's own accounting at ~35-55 us of client CPU per
chunk; httpx's default transport (kept for https) agrees within 2% only up to ~4.3k
tok/s at ~100-180 us per chunk. The SSE parsing here (a ``bytes.split`` and a
``json.loads`` per event) is about a quarter of the fast path's cost.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import ssl
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

try:  # pragma: no cover - depends on the environment
    import sniffio  # noqa: F401
except ImportError:
    # httpcore imports sniffio each time it creates a lock (several times per request);
    # when sniffio is absent every attempt rescans sys.path (~60 us). A None entry makes
    # the failed import instant; the outcome (ImportError, i.e. asyncio) is unchanged.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

from tuner.metrics import LevelMetrics, summarize
from tuner.records import LevelRecords, RequestRecord
from tuner.workload import Workload

#: Characters per token of English prompt text (tokenizer rule of thumb), used to size
#: ``prompt_tokens`` prompts.
CHARS_PER_TOKEN = 4
#: A closed-loop or Poisson level gives up once this many requests (at least, and at
#: least 2 x C) failed without a single success: the server is down, and hammering it
#: for the rest of the window would only inflate the error count.
FAILING_LEVEL_MIN_ERRORS = 16
#: Pause of a closed-loop client after a failed request (seconds), so that a failing
#: server is not hit in a tight loop.
ERROR_BACKOFF_S = 0.05

OnLevel = Callable[[LevelMetrics], "bool | Awaitable[bool | None] | None"]

_QUESTIONS = (
    "Explain how a hash map handles collisions, with a short example.",
    "Write a haiku about autumn rain in a mountain village.",
    "What are the main causes of inflation? Give three and explain each briefly.",
    "Summarize the plot of a heist movie you invent, in one paragraph.",
    "How does TCP congestion control work? Keep it practical.",
    "Give me a recipe for a vegetarian dinner for four people.",
    "Compare Python and Rust for writing a command-line tool.",
    "Describe the water cycle to a ten-year-old.",
    "What should I check before buying a used car?",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain the difference between a process and a thread.",
    "Plan a three-day trip to Lisbon on a modest budget.",
    "Why is the sky blue? Include the physics.",
    "Draft a polite email asking a colleague to review a design document.",
    "What is gradient descent and why does the learning rate matter?",
    "List the pros and cons of remote work for a small startup.",
)
# fmt: off
_FILLER = ("context", "system", "detail", "report", "answer", "section", "careful", "example", "review",
           "summary", "result", "measure", "process", "request", "design", "number", "simple", "market")
# fmt: on


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Client time limits (seconds).

    ``read_s`` bounds the silence between two chunks, including the wait for the first
    one (queueing at a saturated server); ``request_s`` bounds a whole request (None:
    ``request_base_s + max_tokens * request_per_token_s``, i.e. a 1 tok/s floor).
    """

    connect_s: float = 10.0
    read_s: float = 300.0
    request_s: float | None = None
    request_base_s: float = 60.0
    request_per_token_s: float = 1.0

    def for_request(self, max_tokens: int) -> float:
        if self.request_s is not None:
            return self.request_s
        return self.request_base_s + max_tokens * self.request_per_token_s


def chat_prompt(rng: np.random.Generator, index: int, prompt_tokens: int | None) -> str:
    """A chat prompt whose first words differ per request, so a prefix cache cannot
    serve one request from another; ``prompt_tokens`` sets an approximate length."""
    tag = f"Ticket {int(rng.integers(1 << 40)):010x}-{index}."
    question = _QUESTIONS[int(rng.integers(len(_QUESTIONS)))]
    if prompt_tokens is None:
        return f"{tag} {question}"
    target_chars = prompt_tokens * CHARS_PER_TOKEN
    words = [tag, question, "Background notes:"]
    size = sum(len(w) + 1 for w in words)
    picks = rng.integers(len(_FILLER), size=max(1, target_chars // 6))
    i = 0
    while size < target_chars:
        w = _FILLER[int(picks[i % len(picks)])]
        words.append(w)
        size += len(w) + 1
        i += 1
    return " ".join(words)


_SSL_CONTEXT: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: building one costs ~40 ms, sharing it ~0.3 ms."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    return _SSL_CONTEXT


# --- HTTP/1.1 transport ----------------------------------------------------------------------
class _Connection(asyncio.Protocol):
    """One HTTP/1.1 client connection: parses response heads and bodies (Content-Length,
    chunked, or until close) as bytes arrive, and hands the body over per socket read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.parts: list[bytes] = []  # decoded body bytes not yet consumed
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.has_head = False
        self.body_done = False
        self.closed = False
        self.keep_alive = True
        self.error: Exception | None = None
        self.reused = False
        self._mode = ""  # "length" | "chunked" | "close"
        self._left = 0  # bytes left in the body (length) or in the current chunk
        self._chunk_state = "size"  # size | data | crlf | trailer
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timeout = 0.0
        self._since = 0.0
        self._what = ""

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        try:
            self._parse()
        except (ValueError, IndexError) as exc:
            self.error = httpx.RemoteProtocolError(f"malformed HTTP response: {exc}")
            self.keep_alive = False
            if self.transport is not None:
                self.transport.close()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.has_head and self._mode == "close":
            self.body_done = True
        self._wake()

    # parsing
    def start_response(self) -> None:
        self.status, self.reason, self.headers = 0, b"", []
        self.has_head = self.body_done = False
        self.parts.clear()
        self._chunk_state = "size"

    def _parse(self) -> None:
        if not self.has_head:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(self.buf[:end]).split(b"\r\n")
            del self.buf[: end + 4]
            version, status, *reason = lines[0].split(b" ", 2)
            if not version.startswith(b"HTTP/1."):
                raise ValueError(f"bad status line {lines[0][:80]!r}")
            self.status = int(status)
            self.reason = reason[0] if reason else b""
            if 100 <= self.status < 200:
                self._parse()  # interim response (100 Continue): skip it
                return
            self.headers = []
            length = None
            chunked = False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name, value = name.strip().lower(), value.strip()
                self.headers.append((name, value))
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = b"chunked" in value.lower()
                elif name == b"connection" and value.lower() == b"close":
                    self.keep_alive = False
            if version == b"HTTP/1.0":
                self.keep_alive = False
            self.has_head = True
            if self.status in (204, 304):
                self._mode, self.body_done = "length", True
            elif chunked:
                self._mode = "chunked"
            elif length is not None:
                self._mode, self._left = "length", length
                self.body_done = length == 0
            else:
                self._mode, self.keep_alive = "close", False
        if self.body_done:
            return
        if self._mode == "length":
            take = min(self._left, len(self.buf))
            if take:
                self.parts.append(bytes(self.buf[:take]))
                del self.buf[:take]
                self._left -= take
            self.body_done = self._left == 0
        elif self._mode == "close":
            if self.buf:
                self.parts.append(bytes(self.buf))
                self.buf.clear()
        else:
            self._parse_chunked()

    def _parse_chunked(self) -> None:
        buf = self.buf
        while buf:
            if self._chunk_state == "size":
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(buf[:end]).split(b";")[0], 16)
                del buf[: end + 2]
                self._left = size
                self._chunk_state = "data" if size else "trailer"
            elif self._chunk_state == "data":
                take = min(self._left, len(buf))
                self.parts.append(bytes(buf[:take]))
                del buf[:take]
                self._left -= take
                if not self._left:
                    self._chunk_state = "crlf"
            elif self._chunk_state == "crlf":
                if len(buf) < 2:
                    return
                if buf[:2] != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
                del buf[:2]
                self._chunk_state = "size"
            else:  # trailer section: lines until an empty one
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                del buf[: end + 2]
                if end == 0:
                    self.body_done = True
                    return

    # waiting
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self, timeout: float | None, what: str) -> None:
        """Wait for the next bytes (or the end), at most ``timeout`` seconds.

        One timer per connection, re-armed lazily, instead of a timer per wait: a stream
        waits once per chunk, and scheduling and cancelling a timer each time (heap
        operations among hundreds of connections) was a fifth of the client's CPU.
        """
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        if timeout is not None:
            self._timeout, self._what, self._since = timeout, what, loop.time()
            if self._timer is None:
                self._timer = loop.call_at(self._since + timeout, self._on_timer)
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _on_timer(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # not waiting now; the next wait arms a timer again
        loop = asyncio.get_running_loop()
        due = self._since + self._timeout
        if loop.time() >= due:
            waiter.set_exception(
                httpx.ReadTimeout(f"no data for {self._timeout} s while reading the {self._what}")
            )
        else:
            self._timer = loop.call_at(due, self._on_timer)

    async def read_head(self, timeout: float | None) -> None:
        while not self.has_head:
            if self.error is not None:
                raise self.error
            if self.closed:
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            await self._wait(timeout, "response head")

    async def read_body(self, timeout: float | None) -> bytes | None:
        """The body bytes that arrived since the last call; None at the end of the body."""
        while True:
            if self.parts:
                data = self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)
                self.parts.clear()
                return data
            if self.error is not None:
                raise self.error
            if self.body_done:
                return None
            if self.closed:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
            await self._wait(timeout, "response body")

    @property
    def reusable(self) -> bool:
        return self.keep_alive and self.body_done and not self.closed and not self.buf and self.error is None


class _Body(httpx.AsyncByteStream):
    def __init__(self, conn: _Connection, pool: FastTransport, key: tuple[str, int], timeout: float | None):
        self.conn, self.pool, self.key, self.timeout = conn, pool, key, timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (data := await self.conn.read_body(self.timeout)) is not None:
            yield data

    async def aclose(self) -> None:
        self.pool.release(self.key, self.conn)


class FastTransport(httpx.AsyncBaseTransport):
    """A lean HTTP/1.1 (plain TCP) transport for ``httpx.AsyncClient``.

    Why: with httpx's default transport a request costs ~1 ms of client CPU (httpcore's
    locks yield to the event loop several times before the request is written, and the
    head and body go out in two writes), so the first request of a C=256 burst left the
    client ~175 ms after the burst started; and each SSE chunk costs ~70-130 us (h11 event
    + anyio read with its cancel scope). Here a request is one ``write``, a response body
    is handed over once per socket read, and keep-alive connections are reused from a
    free list (one connection per in-flight request). Timeouts follow the request's
    httpx timeout (``connect``, ``read`` between reads); failures raise httpx's own
    exceptions (``ConnectError``, ``ReadTimeout``, ``RemoteProtocolError``...), so callers
    cannot tell the transports apart. TLS is not handled: use the default transport.
    """

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self.connections_opened = 0

    async def _connect(self, host: str, port: int, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(_Connection, host, port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} took more than {timeout} s") from None
        except OSError as exc:
            raise httpx.ConnectError(f"{host}:{port}: {exc.strerror or exc}") from exc
        self.connections_opened += 1
        return conn

    def release(self, key: tuple[str, int], conn: _Connection) -> None:
        if conn.reusable:
            conn.reused = True
            self._idle.setdefault(key, []).append(conn)
        elif conn.transport is not None and not conn.closed:
            conn.transport.abort()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"FastTransport speaks plain http, not {url.scheme!r}")
        key = (url.host, url.port or 80)
        timeout = request.extensions.get("timeout") or {}
        body = await request.aread()
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), url.raw_path)]
        head.extend(b"%s: %s\r\n" % (k, v) for k, v in request.headers.raw)
        message = b"".join(head) + b"\r\n" + body
        idle = self._idle.get(key)
        for attempt in range(2):
            conn = None
            while idle and conn is None:
                candidate = idle.pop()
                if candidate.reusable:
                    conn = candidate
            if conn is None:
                conn = await self._connect(*key, timeout.get("connect"))
            conn.start_response()
            assert conn.transport is not None
            conn.transport.write(message)
            try:
                await conn.read_head(timeout.get("read"))
                break
            except httpx.RemoteProtocolError:
                conn.transport.abort()
                # A kept-alive connection the server closed as we reused it: retry once
                # on a fresh one (the request never reached the application).
                if not conn.reused or attempt:
                    raise
            except BaseException:  # timeouts, cancellation: the connection is unusable
                conn.transport.abort()
                raise
        return httpx.Response(
            conn.status,
            headers=conn.headers,
            stream=_Body(conn, self, key, timeout.get("read")),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": conn.reason},
        )

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                if conn.transport is not None:
                    conn.transport.close()
        self._idle.clear()


def make_client(
    url: str, concurrency: int, timeouts: Timeouts | None = None, *, fast: bool = True
) -> httpx.AsyncClient:
    """An HTTP client for ``url`` with explicit timeouts.

    ``fast`` (plain http only): :class:`FastTransport`, one connection per in-flight
    request however many; otherwise httpx's default transport with ``concurrency``
    keep-alive connections.
    """
    t = timeouts or Timeouts()
    common: dict[str, Any] = {
        "base_url": url.rstrip("/"),
        "timeout": httpx.Timeout(connect=t.connect_s, read=t.read_s, write=t.connect_s, pool=None),
        "headers": {"accept-encoding": "identity"},
        "trust_env": False,  # a loopback or LAN server must not go through an HTTP proxy
    }
    if fast and url.startswith("http://"):
        return httpx.AsyncClient(transport=FastTransport(), **common)
    limits = httpx.Limits(
        max_connections=max(1, concurrency),
        max_keepalive_connections=max(1, concurrency),
        keepalive_expiry=60.0,
    )
    return httpx.AsyncClient(limits=limits, verify=_ssl_context(), **common)


class ClientSet:
    """The connections of a sweep to one server, handed out per request.

    With :class:`FastTransport` (plain http, the default) one ``httpx.AsyncClient``
    serves every request, each on its own keep-alive connection. With httpx's default
    transport (https, or ``fast=False``) it is one client per in-flight request, each
    limited to one connection: httpx's pool rescans all of its connections whenever a
    request starts or ends (with a ``poll`` syscall per idle one), which at C=256 costs
    more CPU than the streams themselves. Either way the number of open connections is
    the number of requests in flight, and warm connections carry over between levels.
    """

    def __init__(self, url: str, timeouts: Timeouts | None = None, *, fast: bool = True):
        self.url = url
        self.timeouts = timeouts or Timeouts()
        self.fast = fast and url.startswith("http://")
        self._shared = make_client(url, 1, self.timeouts) if self.fast else None
        self._free: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []

    def acquire(self) -> httpx.AsyncClient:
        if self._shared is not None:
            return self._shared
        if self._free:
            return self._free.pop()
        client = make_client(self.url, 1, self.timeouts, fast=False)
        self._all.append(client)
        return client

    def release(self, client: httpx.AsyncClient) -> None:
        if client is not self._shared:
            self._free.append(client)

    @property
    def size(self) -> int:
        """Connections opened so far."""
        if self._shared is not None:
            return self._shared._transport.connections_opened  # type: ignore[attr-defined]
        return len(self._all)

    async def aclose(self) -> None:
        clients, self._all, self._free = self._all, [], []
        if self._shared is not None:
            clients.append(self._shared)
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)

    async def __aenter__(self) -> ClientSet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def request_body(model: str, prompt: str, max_tokens: int, ignore_eos: bool) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


_JSON_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}


class _StreamError(Exception):
    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def _parse_event(payload: bytes, state: list) -> None:
    """Apply one SSE ``data:`` payload to ``state`` = [content_chunks, usage_tokens, done,
    prompt_tokens]. Raises _StreamError for malformed or error events."""
    try:
        obj = json.loads(payload)
    except ValueError:
        raise _StreamError("bad-sse") from None
    if not isinstance(obj, dict):
        raise _StreamError("bad-sse")
    if "error" in obj or obj.get("object") == "error":
        raise _StreamError("server-error")
    choices = obj.get("choices")
    if choices:
        try:
            delta = choices[0].get("delta") or {}
        except (AttributeError, IndexError, TypeError):
            raise _StreamError("bad-sse") from None
        if delta.get("content") or delta.get("reasoning_content"):
            state[0] += 1
    usage = obj.get("usage")
    if isinstance(usage, dict):
        ct = usage.get("completion_tokens")
        if isinstance(ct, int):
            state[1] = ct
        pt = usage.get("prompt_tokens")
        if isinstance(pt, int):
            state[3] = pt


async def _consume_sse(resp: httpx.Response, rec: RequestRecord) -> None:
    """Read an SSE stream into ``rec`` (token times, counts); raises _StreamError."""
    times: list[float] = []
    state: list = [0, None, False, 0]
    buf = b""
    clock = time.perf_counter
    async for data in resp.aiter_bytes():
        now = clock()
        buf = buf + data if buf else data
        if b"\n" not in buf:
            continue
        lines = buf.split(b"\n")
        buf = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    state[2] = True
                    continue
                before = state[0]
                _parse_event(payload, state)
                if state[0] != before:
                    times.append(now)
            elif line and line != b"\r" and not line.startswith((b":", b"event:", b"id:", b"retry:")):
                raise _StreamError("bad-sse")
    if buf.strip():
        # A last line without its newline: parse it, or call the stream malformed.
        line = buf.strip()
        if not line.startswith(b"data:"):
            raise _StreamError("bad-sse")
        payload = line[5:].strip()
        if payload == b"[DONE]":
            state[2] = True
        else:
            _parse_event(payload, state)
    if times:
        rec.first_token = times[0]
        rec.token_times = np.array(times)
    rec.output_tokens = state[1] if state[1] is not None else state[0]
    rec.prompt_tokens = state[3]
    if not state[2]:
        raise _StreamError("incomplete-stream")


async def run_request(
    client: httpx.AsyncClient, body: bytes, timeout_s: float, rec: RequestRecord | None = None
) -> RequestRecord:
    """Send one streaming chat request and fill its record; never raises (except on
    cancellation): failures become ``rec.error``."""
    rec = rec or RequestRecord(start=0.0)
    rec.start = time.perf_counter()
    got_response = False
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream(
                "POST", "/v1/chat/completions", content=body, headers=_JSON_HEADERS
            ) as resp:
                got_response = True
                if resp.status_code != 200:
                    rec.error = f"http-{resp.status_code}"
                    await resp.aclose()
                else:
                    await _consume_sse(resp, rec)
    except _StreamError as exc:
        rec.error = exc.kind
    except TimeoutError:
        rec.error = "timeout"
    except httpx.ConnectTimeout:
        rec.error = "connect-timeout"
    except httpx.ConnectError:
        rec.error = "connect"
    except httpx.ReadTimeout:
        rec.error = "read-timeout"
    except httpx.TimeoutException:
        rec.error = "timeout"
    except (httpx.RemoteProtocolError, httpx.ReadError):
        # The server closed the connection: mid-stream, or before answering at all.
        rec.error = "incomplete-stream" if got_response else "disconnected"
    except httpx.HTTPError as exc:
        rec.error = f"http-error-{type(exc).__name__}"
    except (OSError, ValueError, UnicodeError) as exc:
        rec.error = f"client-{type(exc).__name__}"
    rec.end = time.perf_counter()
    return rec


async def discover_model(client: httpx.AsyncClient) -> str:
    """The served model name from ``/v1/models`` (``"default"`` when unavailable)."""
    try:
        resp = await client.get("/v1/models", timeout=10.0)
        data = resp.json().get("data") or []
        if resp.status_code == 200 and data and isinstance(data[0].get("id"), str):
            return data[0]["id"]
    except (httpx.HTTPError, ValueError, AttributeError, TypeError):
        pass
    return "default"


async def server_info(url: str, timeout_s: float = 10.0) -> dict[str, Any] | None:
    """SGLang's ``/server_info`` (or the older ``/get_server_info``), if the server has one."""
    async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=timeout_s, trust_env=False) as client:
        for path in ("/server_info", "/get_server_info"):
            try:
                resp = await client.get(path)
                if resp.status_code == 200:
                    info = resp.json()
                    if isinstance(info, dict):
                        return info
            except (httpx.HTTPError, ValueError):
                return None
    return None


class _Level:
    """Shared state of one level: request bodies, records, and the failing-server rule."""

    def __init__(
        self,
        clients: httpx.AsyncClient | ClientSet,
        workload: Workload,
        concurrency: int,
        model: str,
        seed: int,
        timeouts: Timeouts,
    ):
        self.clients, self.workload, self.c = clients, workload, concurrency
        self.model = model
        self.max_tokens = workload.max_tokens_for(concurrency)
        self.timeout_s = timeouts.for_request(self.max_tokens)
        self.rng = np.random.default_rng([seed, concurrency])
        self.sent = 0
        self.errors = 0
        self.successes = 0
        self.failing = asyncio.Event()

    def body(self) -> bytes:
        self.sent += 1
        prompt = chat_prompt(self.rng, self.sent, self.workload.prompt_tokens)
        return request_body(self.model, prompt, self.max_tokens, self.workload.ignore_eos)

    async def one(self, body: bytes | None = None) -> RequestRecord:
        body = body or self.body()
        if isinstance(self.clients, ClientSet):
            client = self.clients.acquire()
            try:
                rec = await run_request(client, body, self.timeout_s)
            finally:
                self.clients.release(client)
        else:
            rec = await run_request(self.clients, body, self.timeout_s)
        if rec.error is None:
            self.successes += 1
        else:
            self.errors += 1
            if not self.successes and self.errors >= max(FAILING_LEVEL_MIN_ERRORS, 2 * self.c):
                self.failing.set()
        return rec

    async def burst(self) -> LevelRecords:
        bodies = [self.body() for _ in range(self.c)]  # built before the clock starts
        started = time.perf_counter()
        records = await asyncio.gather(*(self.one(b) for b in bodies))
        return self._result(list(records), started, time.perf_counter())

    async def closed_loop(self) -> LevelRecords:
        wl, c = self.workload, self.c
        t0 = time.perf_counter()
        win_start, win_end = t0 + wl.ramp_s, t0 + wl.ramp_s + wl.duration_s
        records: list[RequestRecord] = []

        async def client(i: int) -> None:
            await asyncio.sleep(wl.ramp_s * i / c)
            while time.perf_counter() < win_end:
                rec = await self.one()
                if rec.end is not None and win_start <= rec.end <= win_end:
                    records.append(rec)
                if rec.error is not None:
                    await asyncio.sleep(ERROR_BACKOFF_S)

        tasks = [asyncio.create_task(client(i)) for i in range(c)]
        stopper = asyncio.create_task(self.failing.wait())
        await _wait_until(tasks, stopper, win_end)
        ended = min(time.perf_counter(), win_end)
        for t in [*tasks, stopper]:
            t.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
        return self._result(records, win_start if ended >= win_start else t0, ended)

    async def poisson(self) -> LevelRecords:
        """``max(1, rate x duration)`` requests with exponential gaps (the simulator's
        definition, so both run the same experiment); the wall runs to the last finish."""
        wl = self.workload
        rate = wl.rate * self.c
        n = max(1, int(rate * wl.duration_s))
        offsets = np.cumsum(self.rng.exponential(1.0 / rate, n))
        t0 = time.perf_counter()
        tasks: list[asyncio.Task[RequestRecord]] = []
        for offset in offsets.tolist():
            if self.failing.is_set():
                break
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.one()))
        records = list(await asyncio.gather(*tasks))
        ends = [r.end for r in records if r.end is not None]
        return self._result(records, t0, max(ends) if ends else time.perf_counter())

    def _result(self, records: list[RequestRecord], started: float, ended: float) -> LevelRecords:
        return LevelRecords(
            concurrency=self.c, records=records, started=started, ended=ended, max_tokens=self.max_tokens
        )


async def _wait_until(tasks: Sequence[asyncio.Task], stopper: asyncio.Task, deadline: float) -> None:
    """Wait until ``deadline``, all tasks finish, or the stopper fires."""
    pending = {*tasks, stopper}
    while pending:
        left = deadline - time.perf_counter()
        if left <= 0 or stopper.done():
            return
        done, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            return
        if pending == {stopper}:
            return


async def run_level(
    client_or_url: httpx.AsyncClient | ClientSet | str,
    workload: Workload,
    concurrency: int,
    *,
    model_name: str | None = None,
    seed: int = 0,
    timeouts: Timeouts | None = None,
    fast: bool = True,
) -> LevelRecords:
    """Measure one concurrency level of ``workload``; returns its records.

    With a URL, connections are opened here (one per in-flight request, see
    :class:`ClientSet`) and closed at the end; with a :class:`ClientSet` or an
    ``httpx.AsyncClient`` the caller owns them (a single client's pool is the caller's
    to size, and costs more CPU at high concurrency). ``fast=False`` uses httpx's default
    transport instead of :class:`FastTransport` (https always does).
    """
    timeouts = timeouts or Timeouts()
    if isinstance(client_or_url, str):
        async with ClientSet(client_or_url, timeouts, fast=fast) as clients:
            return await run_level(
                clients, workload, concurrency, model_name=model_name, seed=seed, timeouts=timeouts
            )
    if model_name is None:
        if isinstance(client_or_url, ClientSet):
            client = client_or_url.acquire()
            try:
                model_name = await discover_model(client)
            finally:
                client_or_url.release(client)
        else:
            model_name = await discover_model(client_or_url)
    level = _Level(client_or_url, workload, concurrency, model_name, seed, timeouts)
    if workload.kind == "burst":
        return await level.burst()
    if workload.kind == "closed-loop":
        return await level.closed_loop()
    return await level.poisson()


async def warm_up(
    clients: ClientSet | str,
    workload: Workload,
    *,
    model_name: str | None = None,
    timeouts: Timeouts | None = None,
) -> list[RequestRecord]:
    """Send the workload's warm-up requests one after another (results are not part of any
    level; they absorb the server's slow first request)."""
    timeouts = timeouts or Timeouts()
    if isinstance(clients, str):
        async with ClientSet(clients, timeouts) as owned:
            return await warm_up(owned, workload, model_name=model_name, timeouts=timeouts)
    client = clients.acquire()
    try:
        model = model_name or await discover_model(client)
        rng = np.random.default_rng([0, 0])
        out = []
        for i in range(workload.warmup_requests):
            body = request_body(model, chat_prompt(rng, i, None), workload.warmup_max_tokens, True)
            out.append(await run_request(client, body, timeouts.for_request(workload.warmup_max_tokens)))
        return out
    finally:
        clients.release(client)


async def run_sweep(
    url: str,
    workload: Workload,
    *,
    on_level: OnLevel | None = None,
    model_name: str | None = None,
    seed: int = 0,
    timeouts: Timeouts | None = None,
    warmup: bool = True,
    fast: bool = True,
    on_records: Callable[[LevelRecords], bool | None] | None = None,
) -> list[LevelRecords]:
    """Warm up, then measure the workload's levels lowest first.

    ``on_level`` receives each level's :class:`LevelMetrics` (it may be a coroutine
    function); returning ``False`` stops the sweep (this is how a study prunes).
    ``on_records`` receives the level's raw records instead (same contract).
    ``fast``: see :func:`run_level`.
    """
    timeouts = timeouts or Timeouts()
    out: list[LevelRecords] = []
    async with ClientSet(url, timeouts, fast=fast) as clients:
        if model_name is None:
            client = clients.acquire()
            model_name = await discover_model(client)
            clients.release(client)
        if warmup and workload.warmup_requests:
            await warm_up(clients, workload, model_name=model_name, timeouts=timeouts)
        for c in workload.levels:
            level = await run_level(clients, workload, c, model_name=model_name, seed=seed, timeouts=timeouts)
            out.append(level)
            if on_records is not None and on_records(level) is False:
                break
            if on_level is not None:
                verdict = on_level(summarize(level))
                if inspect.isawaitable(verdict):
                    verdict = await verdict
                if verdict is False:
                    break
    return out


def measure(url: str, workload: Workload, **kwargs: Any) -> list[LevelRecords]:
    """Synchronous :func:`run_sweep` (its own event loop); same keyword arguments."""
    return asyncio.run(run_sweep(url, workload, **kwargs))
