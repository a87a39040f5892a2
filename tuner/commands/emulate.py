"""``tuner emulate``: an SGLang-compatible HTTP server driven by the performance model.

``tuner emulate --hardware ID --model ID [--speedup K] -- <SGLang launch flags>`` fails
like SGLang for flags or memory plans SGLang refuses, otherwise serves SGLang's HTTP API
(OpenAI chat completions, ``/generate``, health and info endpoints) and streams tokens
at the modelled pace; see :mod:`tuner.sim.server`.
"""

from __future__ import annotations

import argparse

from tuner.commands._common import server_flags
from tuner.sim import server


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "emulate",
        help="serve SGLang's HTTP API from the performance model (no GPU needed)",
        description="Run an SGLang-compatible server on the simulated host: the same launch checks as "
        "`tuner simulate` (invalid flags and OOM fail like SGLang, exit 1), then /health, /server_info, "
        "/v1/chat/completions, /generate ... with tokens paced by the performance model. SGLang flags "
        "(including --host/--port; default 127.0.0.1:30000) follow `--`.",
    )
    server.add_arguments(p)
    p.add_argument("flags", nargs=argparse.REMAINDER, help="-- then SGLang launch flags")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    flags = server_flags(args.flags)
    return server.run(args, flags)
