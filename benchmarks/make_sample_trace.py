"""Write the synthetic sample trace shipped with the project (search_spaces/traces/chat-sample.jsonl).

    python benchmarks/make_sample_trace.py [--requests 400] [--seed 2026]

A mix that a chat deployment with document questions sees: 60% short chat turns (prompt
median 300 tokens) and 40% long-context requests (prompt median 3,000 tokens, pasted
documents), replies log-normal around 250 tokens (capped at 2,048), Poisson arrivals at
3 requests/s. The file is synthetic: no real user's traffic is in it. Deterministic for a
seed, so the file in the repository is reproducible.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "search_spaces" / "traces" / "chat-sample.jsonl"
SHORT_SHARE = 0.6
SHORT_PROMPT = (300, 0.9)  # median tokens, log-space sigma
LONG_PROMPT = (3000, 0.6)
REPLY = (250, 0.8)
MAX_PROMPT, MAX_REPLY = 16_384, 2_048
RATE_PER_S = 3.0


def make(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    short = rng.random(n) < SHORT_SHARE
    prompt = np.where(
        short,
        rng.lognormal(np.log(SHORT_PROMPT[0]), SHORT_PROMPT[1], n),
        rng.lognormal(np.log(LONG_PROMPT[0]), LONG_PROMPT[1], n),
    )
    reply = rng.lognormal(np.log(REPLY[0]), REPLY[1], n)
    arrivals = np.cumsum(rng.exponential(1.0 / RATE_PER_S, n))
    arrivals -= arrivals[0]
    return [
        {
            "arrival_s": round(float(a), 3),
            "prompt_tokens": int(np.clip(round(p), 16, MAX_PROMPT)),
            "output_tokens": int(np.clip(round(r), 8, MAX_REPLY)),
        }
        for a, p, r in zip(arrivals, prompt, reply, strict=True)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rows = make(args.requests, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    header = "# Synthetic chat trace (benchmarks/make_sample_trace.py)\n"
    args.out.write_text(header + "".join(json.dumps(r) + "\n" for r in rows))
    for name, key in (("prompt", "prompt_tokens"), ("reply", "output_tokens")):
        v = np.array([r[key] for r in rows])
        print(f"{name}: mean {v.mean():.0f}, p50 {np.median(v):.0f}, p99 {np.percentile(v, 99):.0f} tokens")
    print(f"{args.out}: {len(rows)} requests over {rows[-1]['arrival_s']:.0f} s")


if __name__ == "__main__":
    main()
