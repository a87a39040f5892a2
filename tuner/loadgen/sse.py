"""Server-sent events of an OpenAI-compatible chat stream, read into a request record.

A stream is ``data: {json}`` events, one chat-completion chunk each, ended by
``data: [DONE]``. The first token is the first *non-empty* content delta (SGLang and
vLLM open with an empty role chunk); each content chunk gets the time its bytes were
handed over; output tokens come from ``usage.completion_tokens`` when the server sends
it (``stream_options.include_usage``), else from the count of content chunks.

Malformed events, an error event and a stream that ends without ``[DONE]`` raise
:class:`StreamError` carrying the request's error class (``bad-sse``,
``server-error``, ``incomplete-stream``). The parsing (a ``bytes.split`` and a
``json.loads`` per event) is about a quarter of the client's cost per chunk.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import numpy as np

from tuner import watchdog
from tuner.request_records import RequestRecord


class StreamError(Exception):
    """A stream the server sent but that cannot be measured; ``kind`` is the error class."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def parse_event(payload: bytes, state: list) -> None:
    """Apply one SSE ``data:`` payload to ``state`` = [content_chunks, usage_tokens, done,
    prompt_tokens]. Raises StreamError for malformed or error events."""
    try:
        obj = json.loads(payload)
    except ValueError:
        raise StreamError("bad-sse") from None
    if not isinstance(obj, dict):
        raise StreamError("bad-sse")
    if "error" in obj or obj.get("object") == "error":
        raise StreamError("server-error")
    choices = obj.get("choices")
    if choices:
        try:
            delta = choices[0].get("delta") or {}
        except (AttributeError, IndexError, TypeError):
            raise StreamError("bad-sse") from None
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


async def consume_sse(
    chunks: AsyncIterator[bytes], rec: RequestRecord, times: list[float] | None = None
) -> None:
    """Read an SSE stream, given as the body's byte chunks, into ``rec`` (token times,
    counts); raises StreamError. ``times``, when given, receives each token (chunk) time as
    it arrives, so a caller that cancels the stream keeps what came."""
    times = [] if times is None else times
    state: list = [0, None, False, 0]
    buf = b""
    clock = time.perf_counter
    async for data in chunks:
        now = clock()
        watchdog.bytes_received()
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
                parse_event(payload, state)
                if state[0] != before:
                    times.append(now)
            elif line and line != b"\r" and not line.startswith((b":", b"event:", b"id:", b"retry:")):
                raise StreamError("bad-sse")
    if buf.strip():
        # A last line without its newline: parse it, or call the stream malformed.
        line = buf.strip()
        if not line.startswith(b"data:"):
            raise StreamError("bad-sse")
        payload = line[5:].strip()
        if payload == b"[DONE]":
            state[2] = True
        else:
            parse_event(payload, state)
    if times:
        rec.first_token = times[0]
        rec.token_times = np.array(times)
    rec.output_tokens = state[1] if state[1] is not None else state[0]
    rec.prompt_tokens = state[3]
    if not state[2]:
        raise StreamError("incomplete-stream")
