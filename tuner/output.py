"""Printing sweep results: the table people already read, and the JSON shape.

``tuner simulate`` and ``tuner bench`` print exactly the same shapes, so a simulated
sweep and a measured one can be compared line by line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tuner.metrics import LevelMetrics


def format_level_line(m: LevelMetrics) -> str:
    """One level: single-stream tok/s for C=1, aggregate tok/s and wall otherwise."""
    if m.concurrency == 1:
        line = f"  C=1: {m.output_tok_s:.1f} tok/s"
    else:
        line = f"  C={m.concurrency:3d}: {m.output_tok_s:10.1f} tok/s  wall={m.wall_s:.1f}s"
    if m.failed:
        errs = ", ".join(f"{k}={v}" for k, v in sorted(m.errors.items()))
        line += f"  errors: {m.failed} ({errs})"
    return line


def format_levels_table(label: str, levels: Sequence[LevelMetrics]) -> str:
    """The whole table: a ``=== label ===`` header and one line per level."""
    return "\n".join([f"=== {label} ===", *(format_level_line(m) for m in levels)])


def levels_json(levels: Sequence[LevelMetrics], server: Mapping[str, Any] | None = None) -> str:
    """``{"status": "ok", "levels": [...], "server": {...}}``."""
    return json.dumps(
        {"status": "ok", "levels": [m.model_dump() for m in levels], "server": dict(server or {})},
        indent=2,
    )


def failure_json(reason: str, message: str) -> str:
    """``{"status": "failed", "reason": ..., "message": ...}`` for a launch that failed."""
    return json.dumps({"status": "failed", "reason": reason, "message": message}, indent=2)
