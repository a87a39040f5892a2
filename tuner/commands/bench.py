"""``tuner bench``: measure a running server's concurrency sweep over HTTP.

The same table (or JSON) as ``tuner simulate``, measured with :mod:`tuner.loadgen`
against any OpenAI-compatible streaming server: SGLang, vLLM, or ``tuner emulate``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import fields
from typing import Any
from urllib.parse import urlsplit

from tuner.commands._common import add_workload_args, workload_from_args
from tuner.engines.sglang import ServerArgs
from tuner.errors import UsageError
from tuner.loadgen import Timeouts, run_sweep, server_info
from tuner.metrics import LevelMetrics
from tuner.output import format_level_line, levels_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="measure a running server (SGLang, vLLM, tuner emulate) over HTTP",
        description="Measure a concurrency sweep against a running OpenAI-compatible server: streaming "
        "chat completions, warm-up first, levels lowest first. Prints the same table as `tuner simulate` "
        "(or JSON with --json). Request failures are counted per level, they do not stop the sweep.",
    )
    p.add_argument("--url", default="http://127.0.0.1:30000", help="server base URL (default %(default)s)")
    add_workload_args(p)
    p.add_argument("--ramp", type=float, default=5.0, help="closed-loop: seconds to start all clients")
    p.add_argument(
        "--warmup", type=int, default=1, help="warm-up requests before the first level (default 1)"
    )
    p.add_argument("--model-name", help="model name sent in requests (default: the first of /v1/models)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts")
    g = p.add_argument_group("timeouts (seconds)")
    g.add_argument("--connect-timeout", type=float, default=10.0)
    g.add_argument(
        "--read-timeout",
        type=float,
        default=300.0,
        help="longest silence between chunks, including queueing before the first",
    )
    g.add_argument(
        "--request-timeout", type=float, default=None, help="whole request (default: 60 + 1 s per max token)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.set_defaults(handler=run)


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url must be an http(s) URL with a host, got {url!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise UsageError(f"--url has a bad port: {url!r}") from exc
    return url.rstrip("/")


def server_label(info: dict[str, Any] | None, url: str) -> str:
    """The layout a server reports (``TP8 EP4``), else its URL."""
    if info:
        if isinstance(info.get("label"), str) and info["label"]:
            return info["label"]
        known = {f.name for f in fields(ServerArgs)}
        try:
            args = ServerArgs(**{k: v for k, v in info.items() if k in known})
            if "tp_size" in info:
                return args.label()
        except (TypeError, ValueError):
            pass
    return url


def run(args: argparse.Namespace) -> int:
    url = _check_url(args.url)
    for flag, value in (
        ("--connect-timeout", args.connect_timeout),
        ("--read-timeout", args.read_timeout),
        ("--request-timeout", args.request_timeout),
    ):
        if value is not None and value <= 0:
            raise UsageError(f"{flag} must be positive")
    if args.ramp < 0:
        raise UsageError("--ramp must be >= 0")
    if args.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    workload = workload_from_args(args)
    workload = workload.model_copy(update={"ramp_s": args.ramp, "warmup_requests": args.warmup})
    timeouts = Timeouts(
        connect_s=args.connect_timeout, read_s=args.read_timeout, request_s=args.request_timeout
    )
    return asyncio.run(_bench(url, workload, timeouts, args))


async def _bench(url: str, workload: Any, timeouts: Timeouts, args: argparse.Namespace) -> int:
    info = await server_info(url, timeout_s=timeouts.connect_s)
    metrics: list[LevelMetrics] = []
    if not args.json:
        print(f"=== {server_label(info, url)} ===", flush=True)

    def on_level(m: LevelMetrics) -> bool:
        metrics.append(m)
        if not args.json:
            print(format_level_line(m), flush=True)
        return True

    await run_sweep(
        url, workload, on_level=on_level, model_name=args.model_name, seed=args.seed, timeouts=timeouts
    )
    completed = sum(m.completed for m in metrics)
    if args.json:
        out = json.loads(levels_json(metrics, info or {}))
        if not completed:
            out["status"] = "failed"
            out["reason"] = (
                "unreachable"
                if all(set(m.errors) <= {"connect", "connect-timeout"} for m in metrics)
                else "errors"
            )
        print(json.dumps(out, indent=2))
    elif not completed:
        print(f"no request completed at {url}", file=sys.stderr)
    return 0 if completed else 1
