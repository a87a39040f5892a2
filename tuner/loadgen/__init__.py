"""HTTP load generator: measures a concurrency sweep against an OpenAI-compatible server.

Each request streams ``/v1/chat/completions`` and becomes a
:class:`~tuner.request_records.RequestRecord` (start, first token, one timestamp per content
chunk, output tokens, end, error class); the records of a level go to
:func:`tuner.metrics.summarize`, the one metrics code shared with the simulator.

Modules, one concept each:

* :mod:`~tuner.loadgen.transport`: the HTTP/1.1 transport under httpx (plain http).
* :mod:`~tuner.loadgen.sse`: the SSE stream of a chat completion, read into a record.
* :mod:`~tuner.loadgen.client`: connections, timeouts, one request into one record.
* :mod:`~tuner.loadgen.prompts`: prompt text no prefix cache can share.
* :mod:`~tuner.loadgen.sweep`: levels and their burst, closed-loop and Poisson drivers.
"""

from tuner.loadgen.client import (
    ClientSet,
    Timeouts,
    discover_model,
    make_client,
    request_body,
    run_request,
    server_info,
)
from tuner.loadgen.prompts import chat_prompt
from tuner.loadgen.sweep import (
    ERROR_BACKOFF_S,
    FAILING_LEVEL_MIN_ERRORS,
    OnLevel,
    measure,
    run_level,
    run_sweep,
    warm_up,
)
from tuner.loadgen.transport import FastTransport

__all__ = [
    "ERROR_BACKOFF_S",
    "FAILING_LEVEL_MIN_ERRORS",
    "ClientSet",
    "FastTransport",
    "OnLevel",
    "Timeouts",
    "chat_prompt",
    "discover_model",
    "make_client",
    "measure",
    "request_body",
    "run_level",
    "run_request",
    "run_sweep",
    "server_info",
    "warm_up",
]
