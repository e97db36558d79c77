"""BertViz-style head view (Vig, 2019) as one self-contained SVG: tokens on the left attend to tokens
on the right; one colour per head; line opacity = attention weight. Hovering a token shows only its
lines (CSS ``:has()``, no script), and the same SVG is the downloadable image."""

from __future__ import annotations

import html

import numpy as np
from plotly.colors import qualitative

COLOURS = qualitative.Plotly + qualitative.Dark24
ROW, WIDTH, TEXT_W = 24, 640, 170


def head_colour(head: int) -> str:
    """The colour of a head, the same in the legend and the lines."""
    return COLOURS[head % len(COLOURS)]


def svg_height(n_tokens: int) -> int:
    """Height in pixels of the head view of ``n_tokens`` tokens."""
    return ROW * (n_tokens + 1)


def head_view_svg(patterns: np.ndarray, labels: list[str], heads: list[int], first: int = 0,
                  threshold: float = 0.01, uid: str = "hv") -> str:
    """The head view of one layer for positions ``first .. first + len(labels) - 1``.

    Args:
        patterns: ``[n_heads, query_pos, key_pos]`` weights of the window (rows sum to at most 1).
        labels: display labels of the window's tokens.
        heads: the heads to draw.
        first: absolute position of the window's first token (for the labels).
        threshold: weights below it are not drawn (they would be invisible).
        uid: an id for the SVG, so several views on one page keep separate styles.

    Returns:
        An SVG document (str). Lines carry classes ``q{i}`` and ``k{j}``; the token texts ``tq{i}``/``tk{j}``.
    """
    n = len(labels)
    height = svg_height(n)
    x_left, x_right = TEXT_W, WIDTH - TEXT_W
    css = [f"#{uid} text{{font:15px monospace;fill:#222;cursor:pointer}}",
           f"#{uid} line{{stroke-width:2.5}}",
           f"#{uid} text:hover{{font-weight:bold;fill:#000}}"]
    for i in range(n):  # hovering a token hides every line that does not start (or end) at it
        css.append(f"#{uid}:has(.tq{i}:hover) line:not(.q{i}){{display:none}}")
        css.append(f"#{uid}:has(.tk{i}:hover) line:not(.k{i}){{display:none}}")
    parts = [f'<svg id="{uid}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}"><style>{"".join(css)}</style>',
             f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
             f'<text x="{x_left - 8}" y="14" text-anchor="end" style="font-weight:bold">query (from)</text>',
             f'<text x="{x_right + 8}" y="14" style="font-weight:bold">key (to)</text>']
    share = 1.0 / max(1, len(heads)) ** 0.5  # several heads overlap: keep the sum readable
    for h in heads:
        colour = head_colour(h)
        qi, kj = np.nonzero(patterns[h] >= threshold)
        for i, j in zip(qi, kj):
            w = float(patterns[h, i, j])
            parts.append(f'<line class="q{i} k{j}" x1="{x_left}" y1="{ROW * (i + 1) + 5}" x2="{x_right}" '
                         f'y2="{ROW * (j + 1) + 5}" stroke="{colour}" stroke-opacity="{min(1.0, w * share):.3f}">'
                         f'<title>head {h}: {w:.3f}</title></line>')
    for i, label in enumerate(labels):
        text = html.escape(f"{first + i} {label}")
        y = ROW * (i + 1) + 10
        parts.append(f'<text class="tq{i}" x="{x_left - 8}" y="{y}" text-anchor="end">{text}</text>')
        parts.append(f'<text class="tk{i}" x="{x_right + 8}" y="{y}">{text}</text>')
    parts.append("</svg>")
    return "".join(parts)


def legend_html(heads: list[int]) -> str:
    """Coloured head names matching :func:`head_colour`."""
    return " ".join(f'<span style="color:{head_colour(h)};font-weight:bold;font-size:1.1rem">■ head {h}</span>'
                    for h in heads)
