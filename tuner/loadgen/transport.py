"""A lean HTTP/1.1 client transport (plain TCP) for ``httpx.AsyncClient``.

Why not httpx's default transport: there a request costs ~1 ms of client CPU (httpcore's
locks yield to the event loop several times before the request is written, and the head
and body go out in two writes), so the first request of a C=256 burst left the client
~175 ms after the burst started; and each SSE chunk costs ~70-130 us (h11 event + anyio
read with its cancel scope). Here a request is one ``write``, a response body is handed
over once per socket read, and keep-alive connections are reused from a free list.

Responses are parsed by httptools (llhttp, the parser uvicorn uses) rather than by hand:
fed in-process with a C=256 stream's chunks it costs ~0.1-0.2 us per SSE chunk against
~1 us for the hand-written parser it replaced, and ``benchmarks/loadgen_ceiling.py``
(C=256, one token per chunk, speedups 2-16, three interleaved runs each on a shared
2-core machine) measured the same: ceiling median 32.7k tok/s (17.0k, 32.7k, 33.0k)
against 17.0k (16.8k, 17.0k, 32.4k) by hand, the two figures being whether the 33k tok/s
point lands within the 2% agreement, with the client at <= 37% of a core and ~9-11 us of
client CPU per chunk in both. httpx's default transport (kept for https) agrees within
2% only up to ~4.3k tok/s at ~100-180 us per chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httptools
import httpx


class _UnrequestedResponse(Exception):
    """Bytes after a complete response, before the next request: the connection is unusable."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 client connection: feeds the bytes as they arrive to an httptools
    (llhttp) response parser, and hands the decoded body over per socket read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
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
        self._until_close = False  # neither Content-Length nor chunked: the body ends with the connection
        self._expecting = False  # a request is out and its response not complete yet
        self._unrequested = False  # the server sent more than the response asked for
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timeout = 0.0
        self._since = 0.0
        self._what = ""

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._unrequested:
            return  # the connection is done for: nothing after the response is read
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.keep_alive = False
            if not self._unrequested:  # else on_message_begin stopped it: the response read so far stands
                self.error = httpx.RemoteProtocolError(f"malformed HTTP response: {exc}")
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
        if self.has_head and self._until_close:
            self.body_done = True
        self._wake()

    def start_response(self) -> None:
        self.has_head = self.body_done = self._until_close = False
        self.parts.clear()
        self._expecting = True

    # httptools parser callbacks
    def on_message_begin(self) -> None:
        if not self._expecting:
            self._unrequested = True
            raise _UnrequestedResponse  # stops the parser
        self.status, self.reason, self.headers = 0, b"", []

    def on_status(self, reason: bytes) -> None:
        self.reason += reason  # llhttp may hand a span over in pieces

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value.strip()))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            return  # interim response (100 Continue): skip it
        self.status = status
        self.has_head = True
        if not self.parser.should_keep_alive():
            self.keep_alive = False
        if status not in (204, 304):
            framed = any(
                name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower())
                for name, value in self.headers
            )
            self._until_close = not framed

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        if self.has_head:
            self.body_done = True
            self._expecting = False

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
        return self.keep_alive and self.body_done and not self.closed and self.error is None


class _Body(httpx.AsyncByteStream):
    def __init__(self, conn: _Connection, pool: FastTransport, key: tuple[str, int], timeout: float | None):
        self.conn, self.pool, self.key, self.timeout = conn, pool, key, timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (data := await self.conn.read_body(self.timeout)) is not None:
            yield data

    async def aclose(self) -> None:
        self.pool.release(self.key, self.conn)


class FastTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over plain TCP, one connection per in-flight request (see the module
    docstring for why).

    Keep-alive connections are reused from a free list. Timeouts follow the request's
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
        assert conn is not None  # the loop ends with a response head read, or raises
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
