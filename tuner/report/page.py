"""The report as one self-contained HTML page (plotly.js inline, once)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

from tuner.report.data import FIGURES, ReportData, _numbers, failure_rows
from tuner.report.figures import figures
from tuner.report.tables import TOP_HEADER, _command, curve_rows, summary_rows, top_rows

# --------------------------------------------------------------------------- HTML

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; padding: .7rem; overflow-x: auto; font-size: .85rem; white-space: pre-wrap; }
p.caption { color: #555; font-size: .9rem; } nav a { margin-right: 1rem; }
"""


def _html_table(
    header: Sequence[str] | None, rows: Iterable[Sequence[Any]], numeric: Iterable[int] = ()
) -> str:
    num = set(numeric)
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header) + "</tr>")
    for row in rows:
        cells = "".join(
            f'<td class="num">{html.escape(str(c))}</td>' if i in num else f"<td>{html.escape(str(c))}</td>"
            for i, c in enumerate(row)
        )
        out.append(f"<tr>{cells}</tr>")
    out.append("</table>")
    return "\n".join(out)


def render_html(data: ReportData) -> str:
    """The whole report as one HTML document with plotly.js inline (once)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:  # plotly is an optional dependency
        raise RuntimeError(
            "the HTML report needs plotly: pip install plotly (a dependency of tuner)"
        ) from exc

    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tuner report: {e(data.study_name)}</title>",
        f"<style>{_CSS}</style>",
        # plotly.js, inline, exactly once: every figure below draws with it, offline.
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body>",
        f"<h1>tuner report: {e(data.study_name)}</h1>",
        "<nav>"
        + "".join(
            f'<a href="#{i}">{e(t)}</a>'
            for i, t in [
                ("summary", "Summary"),
                ("top", "Top configurations"),
                *FIGURES,
                ("failures", "Failures"),
            ]
        )
        + "</nav>",
        '<h2 id="summary">Summary</h2>',
        _html_table(None, summary_rows(data)),
    ]
    if data.best is not None:
        parts.append(
            f"<p>Winning command (trial #{data.best.number}) "
            '<button type="button" id="copy-command" onclick="navigator.clipboard.writeText('
            "document.getElementById('winning-command').innerText)\">copy</button></p>"
            f'<pre id="winning-command">{e(_command(data.best, data.info))}</pre>'
        )
    parts.append('<h2 id="top">Top configurations</h2>')
    rows = top_rows(data)
    parts.append(
        _html_table(TOP_HEADER, rows, numeric=(0, 2, 3, 4, 5, 6))
        if rows
        else "<p>No feasible measured configuration yet.</p>"
    )
    header, crow = curve_rows(data)
    if crow:
        parts.append(f"<p>Throughput per level (tok/s, mean of the launches), top {len(crow)}:</p>")
        parts.append(_html_table(header, crow, numeric=range(3, len(header))))
    config = {"displaylogo": False, "responsive": True}
    figs = figures(data)
    for fig_id, title in FIGURES:
        fig, caption = figs[fig_id]
        parts.append(f'<h2 id="{fig_id}">{e(title)}</h2>')
        parts.append(f'<p class="caption">{e(caption)}</p>')
        if fig is not None:
            parts.append(
                fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{fig_id}", config=config)
            )
    parts.append('<h2 id="failures">Failures by class</h2>')
    frows = failure_rows(data)
    if frows:
        parts.append(
            _html_table(
                ("class", "count", "trials", "reasons"),
                [
                    (c, len(ns), _numbers(ns), "; ".join(f"{r} (x{k})" for r, k in rs[:5]))
                    for c, ns, rs in frows
                ],
                numeric=(1,),
            )
        )
    else:
        parts.append("<p>None: every trial gave a feasible measurement.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
