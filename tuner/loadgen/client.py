"""The streaming chat client: connections to one server, and one request into one record.

:func:`run_request` streams ``/v1/chat/completions`` (``stream_options.include_usage``)
and fills a :class:`~tuner.request_records.RequestRecord` (the stream itself is read by
:mod:`tuner.loadgen.sse`); it never raises: an unreachable server, HTTP errors,
timeouts and broken streams become the record's error class (``connect``,
``http-500``, ``read-timeout``, ``timeout``, ``disconnected``, ``incomplete-stream``...).
:class:`ClientSet` holds the connections of a sweep, one per request in flight, on
:class:`~tuner.loadgen.transport.FastTransport` for plain http (httpx's default
transport for https).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any

import httpx

from tuner import watchdog
from tuner.loadgen.sse import StreamError, consume_sse
from tuner.loadgen.transport import FastTransport
from tuner.request_records import RequestRecord

_JSON_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}


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


_SSL_CONTEXT: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: building one costs ~40 ms, sharing it ~0.3 ms."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    return _SSL_CONTEXT


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
    """The JSON body of one streaming chat request (usage included in the stream).

    Greedy decoding (temperature 0), as ``sglang.bench_serving`` and vLLM's serving
    benchmark send it: a reply is then a function of its prompt, so every launch of a
    study, which serves the same prompts, gets the same replies and the same reply lengths,
    and two configurations are compared on the same work."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


async def run_request(
    client: httpx.AsyncClient,
    body: bytes,
    timeout_s: float,
    rec: RequestRecord | None = None,
    live: list[float] | None = None,
) -> RequestRecord:
    """Send one streaming chat request and fill its record; never raises (except on
    cancellation): failures become ``rec.error``. ``live`` receives token times as they
    arrive (see :func:`~tuner.loadgen.sse.consume_sse`)."""
    rec = rec or RequestRecord(start=0.0)
    rec.start = time.perf_counter()
    got_response = False
    watchdog.request_started()
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
                    await consume_sse(resp.aiter_bytes(), rec, live)
    except StreamError as exc:
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
    finally:
        watchdog.request_ended()
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
