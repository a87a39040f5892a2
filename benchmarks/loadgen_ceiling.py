"""How many output tokens per second can one client core measure at C=256?

Method: start the emulator (``tuner.sim.server``) at increasing ``--speedup`` with one
token per SSE chunk (``--chunk-ms 0 --max-chunks-per-s 0``: the client's worst case,
as a real SGLang server streams one chunk per token), run a burst level of C=256
``ignore_eos`` requests from this process, and compare:

* the tok/s the load generator measured, against
* the emulator's own accounting: tokens it released / seconds it had requests in flight.

While the generator keeps up the two agree; once it falls behind, chunks queue in the
socket buffers, the measured wall stretches past the server's and the ratio drops. The
ceiling is the highest measured tok/s with agreement within 2%. Past some speedup the
emulator (on the other core of a small box) is the slower side; the client's CPU time
per chunk (``time.process_time``) then gives the second figure: the tok/s one fully
busy client core could take at one token per chunk.

Run: ``python benchmarks/loadgen_ceiling.py [--speedups 2,4,8,16] [--max-tokens 512]
[--transport fast|httpx] [--json]``. Exit status 0 when the ceiling reaches 5,000 tok/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import httpx

from tuner.loadgen import ClientSet, request_body, run_level, run_request
from tuner.metrics import summarize
from tuner.sim.server import EmulatorProcess
from tuner.workload import Workload

GOAL_TOK_S = 5000.0
AGREEMENT = 0.98


def _stats(url: str) -> dict:
    return httpx.get(url + "/server_info", timeout=10, trust_env=False).json()["emulator"]


async def _measure(url: str, concurrency: int, max_tokens: int, fast: bool) -> dict:
    wl = Workload(
        kind="burst",
        levels=(concurrency,),
        max_tokens=max_tokens,
        single_max_tokens=max_tokens,
        ignore_eos=True,
    )
    async with ClientSet(url, fast=fast) as clients:
        # Warm up the server (slow first request) and the client's code paths, and open
        # the level's connections, so the measurement is the steady state.
        warm = Workload(
            kind="burst", levels=(concurrency,), max_tokens=4, single_max_tokens=4, ignore_eos=True
        )
        await run_level(clients, warm, concurrency, model_name="default")
        client = clients.acquire()
        await run_request(client, request_body("default", "warm-up", 4, True), 60)
        clients.release(client)
        before = _stats(url)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        level = await run_level(clients, wl, concurrency, model_name="default")
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - wall0
        after = _stats(url)
    m = summarize(level)
    chunks = sum(len(r.token_times) for r in level.records if r.token_times is not None)
    emu_tokens = after["output_tokens"] - before["output_tokens"]
    emu_busy = after["busy_wall_s"] - before["busy_wall_s"]
    emu_rate = emu_tokens / emu_busy if emu_busy > 0 else float("nan")
    return {
        "measured_tok_s": m.output_tok_s,
        "emulator_tok_s": emu_rate,
        "agreement": m.output_tok_s / emu_rate if emu_rate else float("nan"),
        "tokens": m.output_tokens,
        "emulator_tokens": emu_tokens,
        "errors": m.errors,
        "client_cpu_util": cpu / wall,
        "client_us_per_token": cpu / max(1, m.output_tokens) * 1e6,
        "tokens_per_chunk": m.output_tokens / max(1, chunks),
        "client_us_per_chunk": cpu / max(1, chunks) * 1e6,
        "one_core_tok_s": m.output_tokens / cpu if cpu > 0 else float("nan"),
        "emulator_lag_s": after["lag_s"] - before["lag_s"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speedups", default="2,4,8,16", help="emulator speedups to try, comma-separated")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument(
        "--one-token-per-chunk",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="make the emulator stream one token per SSE chunk, the client's worst case (default); "
        "--no-one-token-per-chunk lets it coalesce as it does by default",
    )
    ap.add_argument(
        "--transport",
        choices=("fast", "httpx"),
        default="fast",
        help="the load generator's transport: its own (default) or httpx's default one",
    )
    ap.add_argument("--json", action="store_true", help="print the points as JSON")
    ns = ap.parse_args(argv)
    options = ["--chunk-ms", "0", "--max-chunks-per-s", "0"] if ns.one_token_per_chunk else []
    points = []
    for speedup in [float(s) for s in ns.speedups.split(",") if s.strip()]:
        with EmulatorProcess(
            ["--tp-size", "8", "--max-running-requests", str(ns.concurrency)],
            speedup=speedup,
            options=options,
        ) as emu:
            measured = asyncio.run(_measure(emu.url, ns.concurrency, ns.max_tokens, ns.transport == "fast"))
        point = {"speedup": speedup, **measured}
        points.append(point)
        if not ns.json:
            print(
                f"speedup {speedup:5.1f}: measured {point['measured_tok_s']:7.0f} tok/s, emulator "
                f"{point['emulator_tok_s']:7.0f} tok/s, agreement {point['agreement'] * 100:6.2f}%, "
                f"{point['tokens_per_chunk']:.2f} tok/chunk, "
                f"client CPU {point['client_cpu_util'] * 100:4.1f}% "
                f"({point['client_us_per_chunk']:.0f} us/chunk)",
                flush=True,
            )
        if point["agreement"] < AGREEMENT - 0.03 and point["client_cpu_util"] > 0.9:
            break  # the generator is saturated; faster servers only say the same
    ok = [p for p in points if p["agreement"] >= AGREEMENT and not p["errors"]]
    ceiling = max((p["measured_tok_s"] for p in ok), default=0.0)
    # What one fully busy core could take at one token per chunk: 1 / (CPU per chunk).
    single = [p for p in points if p["tokens_per_chunk"] <= 1.05]
    one_core = max((1e6 / p["client_us_per_chunk"] for p in single), default=float("nan"))
    summary = {
        "concurrency": ns.concurrency,
        "transport": ns.transport,
        "ceiling_tok_s": ceiling,
        "one_core_tok_s_at_one_token_per_chunk": one_core,
        "goal_tok_s": GOAL_TOK_S,
        "points": points,
    }
    if ns.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"ceiling at C={ns.concurrency}: {ceiling:.0f} tok/s measured within "
            f"{100 - AGREEMENT * 100:.0f}% of the emulator's accounting (goal >= {GOAL_TOK_S:.0f}); "
            f"one client core at one token per chunk: ~{one_core:.0f} tok/s"
        )
    return 0 if ceiling >= GOAL_TOK_S else 1


if __name__ == "__main__":
    sys.exit(main())
