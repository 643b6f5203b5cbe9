"""One self-contained HTML page: plotly.js embedded once, figures, tables, short texts.

The page needs no network: the plotting library is inlined in the head (plotly's own
minified bundle, shipped inside the plotly Python package), each figure is a div and a
`Plotly.newPlot` call. Figures sit in `<figure class="plot" data-plot=NAME>` so tests
(and users' scripts) can find each plot by name.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 0 24px 48px; color: #222; }
h1 { font-size: 1.6em; margin: 24px 0 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #ddd; }
h3 { margin: 24px 0 4px; }
p.lead { color: #555; margin-top: 0; } p.note { color: #555; max-width: 70em; }
div.table-box { max-width: 100%; overflow-x: auto; margin: 8px 0 16px; }
table { border-collapse: collapse; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f6f8; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #2e7d32; } .low { color: #e08e0b; } .high, .bad { color: #c62828; font-weight: 600; }
figure.plot { margin: 0 0 12px; }
nav a { margin-right: 14px; }
"""


@dataclass
class Section:
    """A titled part of the page; `body` is HTML."""

    title: str
    body: str
    anchor: str = ""


@cache
def _plotly_js() -> str:
    return get_plotlyjs()


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def figure_html(fig: go.Figure, name: str) -> str:
    """A figure as a div plus the script that draws it (plotly.js must be on the page).

    The div's id comes from `name` (unique on a page), so the same run gives the same file.
    """
    div_id = "plot-" + re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")
    div = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                      config={"displaylogo": False, "responsive": True})
    return f'<figure class="plot" data-plot="{esc(name)}">{div}</figure>'


def format_value(value: Any) -> str:
    """Numbers readable at a glance: integers as they are, floats with 4 significant digits
    (whole from 10,000 on, below a million; beyond it in exponent notation)."""
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    if isinstance(value, float):
        if abs(value) >= 1e6:
            return f"{value:.4e}"
        return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


def table_html(headers: Sequence[str], rows: Iterable[Sequence[Any]], classes: Sequence[str] = ()) -> str:
    """A table; numbers right-aligned; `classes` gives a CSS class per row (e.g. "bad").

    Headers may break between the words of a metric's name (`inputQueue<wbr>Length`), and a
    table wider than the page still scrolls sideways inside its box: the page never does,
    and no column is cut off."""
    head = "".join(f"<th>{_breakable(esc(h))}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cells = "".join(
            f'<td class="num">{esc(format_value(c))}</td>' if isinstance(c, (int, float)) and not isinstance(c, bool)
            else f"<td>{esc(format_value(c))}</td>" for c in row)
        css = f' class="{classes[i]}"' if i < len(classes) and classes[i] else ""
        body.append(f"<tr{css}>{cells}</tr>")
    return f'<div class="table-box"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _breakable(text: str) -> str:
    """`text` (HTML) with a line break opportunity between the words of camelCase names."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "<wbr>", text)


def render_page(title: str, lead: str, sections: Sequence[Section]) -> str:
    """The whole HTML document."""
    nav = " ".join(f'<a href="#{esc(s.anchor)}">{esc(s.title)}</a>' for s in sections if s.anchor)
    parts = [f'<h2 id="{esc(s.anchor)}">{esc(s.title)}</h2>{s.body}' for s in sections]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
        f"<style>{STYLE}</style><script>{_plotly_js()}</script></head>\n<body>"
        f"<h1>{esc(title)}</h1><p class=\"lead\">{lead}</p><nav>{nav}</nav>\n"
        + "\n".join(parts) + "\n</body></html>\n"
    )
