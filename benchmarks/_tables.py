"""Plain-text and Markdown tables for the benchmark scripts and the README's results section."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the first column left-aligned, the others right."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub Markdown table; numeric columns (all but the first) right-aligned."""

    def esc(cell: Any) -> str:
        return str(cell).replace("|", "\\|")

    lines = [
        "| " + " | ".join(esc(h) for h in header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def format_targets(targets: Sequence[dict[str, Any]], *, markdown: bool = False) -> str:
    """One line per target: met or NOT MET, what it asks, the measured figures."""
    out = []
    for t in targets:
        mark = "met" if t["met"] else "NOT MET"
        if markdown:
            out.append(f"- **{mark}**: {t['target']}: {t['figures']}")
        else:
            out.append(f"  [{mark}] {t['target']}: {t['figures']}")
    return "\n".join(out)
