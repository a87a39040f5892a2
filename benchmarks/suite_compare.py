"""Two runs of the benchmark suite side by side, paired by seed.

    python benchmarks/suite_compare.py BASE.json NEW.json [--strategy tuner]

``BASE.json`` and ``NEW.json`` are copies of benchmarks/results/suite.json written by
benchmarks/suite.py before and after a change (for example at the parent commit and with
the change). A study is chaotic in its inputs, so two versions of the sampler run other
studies from the same seed, and a count of seeds within 2% of the best moves by a few
seeds either way for nothing. The seeds of both runs share their start points and request
draws, so their difference seed by seed is far less noisy than either count: this prints,
per space and over each split, the count within 2% before and after, the mean difference of
the noise-free share of the best (in points) with its standard error, the seeds higher,
lower and the same, and the mean change of server hours per study. A change is worth
keeping when the mean difference clears about two standard errors on the spaces it was
fitted on (the TUNE split), not by its counts alone.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import WITHIN_2
from _tables import format_table

#: Shares closer than this are the same study's recommendation (floating-point noise only).
SAME = 1e-9


@dataclass(frozen=True)
class Paired:
    """One space (or split) of one strategy, compared seed by seed."""

    seeds: int
    within_2_before: int
    within_2_after: int
    #: Mean of after - before, in shares of the best, and its standard error.
    mean_diff: float
    se: float
    higher: int
    lower: int
    server_h_diff: float | None

    @property
    def same(self) -> int:
        return self.seeds - self.higher - self.lower


def paired(before: dict[str, Any], after: dict[str, Any]) -> Paired | None:
    """The seeds two suite rows (``suite.py``'s per-space row of one strategy) have in
    common, compared; None when they have none."""
    a, b = _by_seed(before), _by_seed(after)
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    diffs = [b[s][0] - a[s][0] for s in seeds]
    mean = sum(diffs) / len(diffs)
    var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) if len(diffs) > 1 else 0.0
    hours = [(a[s][1], b[s][1]) for s in seeds]
    server = None
    if all(x is not None and y is not None for x, y in hours):
        server = sum(y - x for x, y in hours if x is not None and y is not None) / len(seeds)
    return Paired(
        seeds=len(seeds),
        within_2_before=sum(a[s][0] >= WITHIN_2 for s in seeds),
        within_2_after=sum(b[s][0] >= WITHIN_2 for s in seeds),
        mean_diff=mean,
        se=math.sqrt(var / len(diffs)),
        higher=sum(d > SAME for d in diffs),
        lower=sum(d < -SAME for d in diffs),
        server_h_diff=server,
    )


def _by_seed(row: dict[str, Any]) -> dict[Any, tuple[float, float | None]]:
    """Seed -> (share of the best, server hours) of one suite row."""
    shares = row["shares"]
    if "seed_ids" not in row:
        raise ValueError(
            "a suite result without per-seed ids (written before benchmarks/suite.py stored them): "
            "run benchmarks/suite.py again to pair its seeds"
        )
    hours = row.get("server_h") or [None] * len(shares)
    return {s: (x, h) for s, x, h in zip(row["seed_ids"], shares, hours, strict=True)}


def compare(before: dict[str, Any], after: dict[str, Any], strategy: str) -> list[tuple[str, str, Paired]]:
    """(space or split, its split, comparison) for every space both runs scored
    ``strategy`` on, then each split's seeds pooled."""
    out: list[tuple[str, str, Paired]] = []
    pooled: dict[str, tuple[dict[str, list[Any]], dict[str, list[Any]]]] = {}
    for name, space in after["spaces"].items():
        row_after = space["rows"].get(strategy)
        row_before = before.get("spaces", {}).get(name, {}).get("rows", {}).get(strategy)
        if row_after is None or row_before is None:
            continue
        p = paired(row_before, row_after)
        if p is None:
            continue
        out.append((name, space["split"], p))
        # Seeds of different spaces are different studies: pooled under (space, seed).
        a, b = pooled.setdefault(space["split"], ({}, {}))
        for side, row in ((a, row_before), (b, row_after)):
            for key in ("shares", "server_h"):
                side.setdefault(key, []).extend(row.get(key) or [None] * len(row["shares"]))
            side.setdefault("seed_ids", []).extend((name, s) for s in row["seed_ids"])
    for split, (a, b) in pooled.items():
        p = paired(a, b)
        if p is not None:
            out.append((f"all {split} spaces", split, p))
    return out


def _points(x: float) -> str:
    return f"{100 * x:+.2f}"


def table(rows: list[tuple[str, str, Paired]]) -> str:
    header = ["space", "split", "seeds", "within 2%", "mean diff (points)", "se"]
    header += ["higher/lower/same", "server h"]
    body = [
        [
            name,
            split,
            str(p.seeds),
            f"{p.within_2_before} -> {p.within_2_after}",
            _points(p.mean_diff),
            f"{100 * p.se:.2f}",
            f"{p.higher}/{p.lower}/{p.same}",
            "-" if p.server_h_diff is None else f"{p.server_h_diff:+.3f}",
        ]
        for name, split, p in rows
    ]
    return format_table(header, body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path, help="suite.json of the run before the change")
    ap.add_argument("after", type=Path, help="suite.json of the run with the change")
    ap.add_argument("--strategy", default="tuner", help="the strategy to compare (default tuner)")
    args = ap.parse_args(argv)
    runs = []
    for path in (args.before, args.after):
        try:
            runs.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            print(f"{path}: not a suite result ({exc})", file=sys.stderr)
            return 2
    budgets = [run.get("budget") for run in runs]
    if budgets[0] != budgets[1]:
        print(f"the runs used different budgets ({budgets[0]} and {budgets[1]})", file=sys.stderr)
        return 2
    try:
        rows = compare(runs[0], runs[1], args.strategy)
    except ValueError as exc:
        print(f"{args.before} or {args.after}: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"no space where both runs scored {args.strategy} on the same seeds", file=sys.stderr)
        return 2
    print(f"{args.strategy}: {args.after} against {args.before}, paired by seed (budget {budgets[1]})")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
