"""Faults the emulator can inject, for testing what the tuner makes of a misbehaving server.

``TUNER_EMULATOR_FAULT=<kind>:<every>`` makes every ``every``-th chat completion fail:

* ``http-429`` / ``http-500``: answered with that status and an error body, no stream;
* ``bad-sse``: half-way through the stream, a line that is no server-sent event;
* ``error-event``: half-way through the stream, SGLang's mid-stream error event (the
  status was 200 already), then the stream ends.

A real server does each of these under load (a rate limiter, a scheduler exception);
the emulator does them on purpose, deterministically.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

FAULT_ENV = "TUNER_EMULATOR_FAULT"
KINDS = ("http-429", "http-500", "bad-sse", "error-event")
#: What a mid-stream fault writes in place of the rest of the stream.
MID_STREAM_BYTES = {
    "bad-sse": b"this is not a server-sent event\n\n",
    "error-event": b'data: {"object":"error","message":"Internal server error: scheduler exception",'
    b'"type":"InternalServerError","param":null,"code":500}\n\n',
}


@dataclass
class Faults:
    """Which requests fail, and how."""

    kind: str
    every: int
    _count: itertools.count = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def parse(cls, text: str | None) -> Faults | None:
        """``kind:every`` (see module docstring); None for an empty value. Raises ValueError."""
        if not text:
            return None
        kind, _, every = text.partition(":")
        if kind not in KINDS:
            raise ValueError(f"{FAULT_ENV}: unknown fault {kind!r} (one of {', '.join(KINDS)})")
        n = int(every or "1")
        if n < 1:
            raise ValueError(f"{FAULT_ENV}: every must be >= 1")
        return cls(kind, n)

    def next(self) -> str | None:
        """The fault of the next request, or None."""
        return self.kind if next(self._count) % self.every == 0 else None

    @property
    def status(self) -> int:
        return int(self.kind.removeprefix("http-"))
