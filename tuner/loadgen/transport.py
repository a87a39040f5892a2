"""A lean HTTP/1.1 client transport (plain TCP) for ``httpx.AsyncClient``.

Why not httpx's default transport: there a request costs ~1 ms of client CPU (httpcore's
locks yield to the event loop several times before the request is written, and the head
and body go out in two writes), so the first request of a C=256 burst left the client
~175 ms after the burst started; and each SSE chunk costs ~70-130 us (h11 event + anyio
read with its cancel scope). Here a request is one ``write``, a response body is handed
over once per socket read, and keep-alive connections are reused from a free list.

Cost (``benchmarks/loadgen_ceiling.py``, C=256, one token per SSE chunk, a 2-core machine
with the emulator on the other core): this transport measures 21k tok/s within 1.1% of
the server's own accounting at ~35-55 us of client CPU per chunk; httpx's default
transport (kept for https) agrees within 2% only up to ~4.3k tok/s at ~100-180 us per
chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx


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
