"""Fidelity of shortened sweeps against the full reference sweep, over random configurations.

    python benchmarks/sweep_fidelity.py [--configs 200] [--noise 0] [--jobs 2]

Full sweep: C=1 at 512 tokens, then 32/64/128/192/256 at 2048 (the reference campaign),
noise off: the truth. Over ``--configs`` random launchable configurations of the reference
space:

* the space's proxy (the sweep a study screens on) measured with noise 0, 2% and 5% (the simulator's
  per-launch and per-step noise): Spearman rank correlation of its peak with the full
  sweep's, top-1 agreement (does it pick the configuration the full sweep picks?), the
  full-sweep value of its pick as a share of the full sweep's best, and its server time
  as a share of the full sweep's; beside it, the full sweep itself measured with the same
  noise (what noise alone does to a ranking);
* a few candidate short sweeps at ``--noise`` (how the default was chosen).

Results: benchmarks/results/sweep_fidelity.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import FULL_SWEEP, launchable, random_configs, reference_space, spearman, sweep, write_result
from _tables import format_table

from tuner.workload import Workload

#: The full reference sweep (kept under this name for the other scripts).
FULL = FULL_SWEEP
CANDIDATES = {
    "1@512 64,192@2048": Workload(levels=(1, 64, 192), max_tokens=2048, single_max_tokens=512),
    "1@256 192@1024": Workload(levels=(1, 192), max_tokens=1024, single_max_tokens=256),
    "1@256 128,256@1024": Workload(levels=(1, 128, 256), max_tokens=1024, single_max_tokens=256),
    "1@128 256@768": Workload(levels=(1, 256), max_tokens=768, single_max_tokens=128),
    "1@128 192@512": Workload(levels=(1, 192), max_tokens=512, single_max_tokens=128),
    "1@128 256@1024": Workload(levels=(1, 256), max_tokens=1024, single_max_tokens=128),
}
#: Noise levels of the default sweep's degradation table.
NOISE_LEVELS = (0.0, 0.02, 0.05)


def describe(wl: Workload) -> str:
    """A sweep in the notation of this file: ``C=1@128, 256@1024`` (level@max tokens)."""
    return ", ".join(f"{c}@{wl.max_tokens_for(c)}" for c in wl.levels)


def _measure(index: int, params: dict[str, Any], candidate_noise: float) -> dict[str, Any] | None:
    """Every sweep of one configuration (None if it cannot launch). Noisy sweeps of
    configuration i use seed i + 1, so their noise is independent across configurations."""
    space = reference_space()
    full, full_t = sweep(space, params, FULL)
    if full is None:
        return None
    out: dict[str, Any] = {"full": full, "full_t": full_t, "default": {}, "full_noisy": {}, "candidates": {}}
    for noise in NOISE_LEVELS:
        v, t = sweep(space, params, space.proxy, seed=index + 1, noise=noise)
        out["default"][str(noise)] = (v or 0.0, t)
        if noise > 0:
            out["full_noisy"][str(noise)] = sweep(space, params, FULL, seed=index + 1, noise=noise)[0] or 0.0
    for name, wl in CANDIDATES.items():
        v, t = sweep(space, params, wl, seed=index + 1, noise=candidate_noise)
        out["candidates"][name] = (v or 0.0, t)
    return out


def _agreement(full: list[float], short: list[float]) -> dict[str, Any]:
    best_full = max(range(len(full)), key=full.__getitem__)
    pick = max(range(len(short)), key=short.__getitem__)
    return {
        "spearman": spearman(full, short),
        "top1": pick == best_full,
        "pick_share_of_best": full[pick] / full[best_full],
    }


def run(configs: int, candidate_noise: float = 0.0, n_jobs: int = 2) -> dict[str, Any]:
    from joblib import Parallel, delayed

    space = reference_space()
    drawn = []
    for params in random_configs(space, configs * 10, seed=7):
        if launchable(space, params):
            drawn.append(params)
            if len(drawn) == configs:
                break
    measured = Parallel(n_jobs=n_jobs, batch_size=8)(
        delayed(_measure)(i, p, candidate_noise) for i, p in enumerate(drawn)
    )
    rows = [m for m in measured if m is not None]
    full = [m["full"] for m in rows]
    full_time = sum(m["full_t"] for m in rows)
    default = {}
    for noise in NOISE_LEVELS:
        key = str(noise)
        short = [m["default"][key][0] for m in rows]
        default[key] = {
            **_agreement(full, short),
            "time_share": sum(m["default"][key][1] for m in rows) / full_time,
            "full_sweep_same_noise": (
                _agreement(full, [m["full_noisy"][key] for m in rows]) if noise > 0 else None
            ),
        }
    candidates = {}
    for name in CANDIDATES:
        short = [m["candidates"][name][0] for m in rows]
        candidates[name] = {
            **_agreement(full, short),
            "time_share": sum(m["candidates"][name][1] for m in rows) / full_time,
        }
    return {
        "configs": len(rows),
        "space": space.name,
        "default_sweep": describe(space.proxy),
        "default": default,
        "candidate_noise": candidate_noise,
        "candidates": candidates,
    }


HEADER = [
    "noise",
    "Spearman",
    "top-1 agrees",
    "pick's full-sweep value",
    "server time vs full",
    "full sweep, same noise: Spearman / top-1",
]


def table_rows(summary: dict[str, Any]) -> list[list[str]]:
    out = []
    for key, row in summary["default"].items():
        same = row["full_sweep_same_noise"]
        out.append(
            [
                f"{float(key):.0%}",
                f"{row['spearman']:.3f}",
                "yes" if row["top1"] else "no",
                f"{row['pick_share_of_best']:.1%} of best",
                f"{row['time_share']:.1%}",
                "-" if same is None else f"{same['spearman']:.3f} / {'yes' if same['top1'] else 'no'}",
            ]
        )
    return out


def text(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['configs']} launchable random configurations of {summary['space']}; "
        f"proxy C={summary['default_sweep']} vs the full reference sweep (noise off)",
        format_table(HEADER, table_rows(summary)),
        "",
        f"candidate short sweeps, noise {summary['candidate_noise']}:",
        format_table(
            ["short sweep", "spearman", "top-1", "time share"],
            [
                [name, f"{c['spearman']:.3f}", "yes" if c["top1"] else "no", f"{c['time_share']:.1%}"]
                for name, c in summary["candidates"].items()
            ],
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int, default=200)
    ap.add_argument("--noise", type=float, default=0.0, help="noise of the candidate short sweeps")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = ap.parse_args(argv)
    summary = run(args.configs, args.noise, args.jobs)
    write_result("sweep_fidelity", summary)
    print(text(summary))
    return summary


if __name__ == "__main__":
    main()
