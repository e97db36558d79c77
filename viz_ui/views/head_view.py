"""BertViz-style head view (Vig, 2019) as one self-contained SVG: tokens on the left attend to tokens
on the right; one colour per head; line opacity = attention weight. Hovering a token shows only its
lines (CSS ``:has()``, no script), and the same SVG is the downloadable image."""

from __future__ import annotations

import html

import numpy as np
from plotly.colors import qualitative

COLOURS = qualitative.Plotly + qualitative.Dark24
ROW, WIDTH, TEXT_W, FONT_PX = 24, 640, 170, 15  # at font scale 1; everything grows with the lecture font scale
THEMES = {"light": ("#ffffff", "#222222", "#000000"), "dark": ("#0e1117", "#fafafa", "#ffffff")}  # background, text, hover
THRESHOLD = 0.01  # default: weights below it are not drawn (they would be invisible)


def head_colour(head: int) -> str:
    """The colour of a head, the same in the legend and the lines."""
    return COLOURS[head % len(COLOURS)]


def svg_height(n_tokens: int, scale: float = 1.0) -> int:
    """Height in pixels of the head view of ``n_tokens`` tokens at font ``scale``."""
    return round(ROW * scale) * (n_tokens + 1)


def n_lines(patterns: np.ndarray, heads: list[int], threshold: float = THRESHOLD) -> int:
    """How many lines :func:`head_view_svg` draws: weights of ``heads`` at or above ``threshold``."""
    return int(sum((patterns[h] >= threshold).sum() for h in heads))


def head_view_svg(patterns: np.ndarray, labels: list[str], heads: list[int], first: int = 0,
                  threshold: float = THRESHOLD, uid: str = "hv", scale: float = 1.0, theme: str = "light",
                  full: float = 1.0) -> str:
    """The head view of one layer for positions ``first .. first + len(labels) - 1``.

    Args:
        patterns: ``[n_heads, query_pos, key_pos]`` weights of the window (rows sum to at most 1).
        labels: display labels of the window's tokens.
        heads: the heads to draw.
        first: absolute position of the window's first token (for the labels).
        threshold: weights below it are not drawn (they would be invisible).
        uid: an id for the SVG, so several views on one page keep separate styles.
        scale: the font scale (lecture mode): row height, font size and widths grow with it.
        theme: ``"light"`` or ``"dark"`` (background and text colours).
        full: the weight drawn fully opaque (1: opacity = weight; lower it when every weight is small).

    Returns:
        An SVG document (str). Lines carry classes ``q{i}`` and ``k{j}``; the token texts ``tq{i}``/``tk{j}``.
    """
    n = len(labels)
    row, width, font = round(ROW * scale), round(WIDTH * scale), round(FONT_PX * scale)
    height = svg_height(n, scale)
    x_left, x_right = round(TEXT_W * scale), width - round(TEXT_W * scale)
    background, ink, hover = THEMES.get(theme, THEMES["light"])
    css = [f"#{uid} text{{font:{font}px monospace;fill:{ink};cursor:pointer}}",
           f"#{uid} line{{stroke-width:{2.5 * scale:g}}}",
           f"#{uid} text:hover{{font-weight:bold;fill:{hover}}}"]
    for i in range(n):  # hovering a token hides every line that does not start (or end) at it
        css.append(f"#{uid}:has(.tq{i}:hover) line:not(.q{i}){{display:none}}")
        css.append(f"#{uid}:has(.tk{i}:hover) line:not(.k{i}){{display:none}}")
    parts = [f'<svg id="{uid}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}"><style>{"".join(css)}</style>',
             f'<rect width="{width}" height="{height}" fill="{background}"/>',
             f'<text x="{x_left - 8}" y="{round(14 * scale)}" text-anchor="end" style="font-weight:bold">query (from)</text>',
             f'<text x="{x_right + 8}" y="{round(14 * scale)}" style="font-weight:bold">key (to)</text>']
    mid = round(5 * scale)
    share = 1.0 / max(1, len(heads)) ** 0.5  # several heads overlap: keep the sum readable
    for h in heads:
        colour = head_colour(h)
        qi, kj = np.nonzero(patterns[h] >= threshold)
        for i, j in zip(qi, kj):
            w = float(patterns[h, i, j])
            parts.append(f'<line class="q{i} k{j}" x1="{x_left}" y1="{row * (i + 1) + mid}" x2="{x_right}" '
                         f'y2="{row * (j + 1) + mid}" stroke="{colour}" stroke-opacity="{min(1.0, w / full * share):.3f}">'
                         f'<title>head {h}: {w:.3f}</title></line>')
    for i, label in enumerate(labels):
        text = html.escape(f"{first + i} {label}")
        y = row * (i + 1) + round(10 * scale)
        parts.append(f'<text class="tq{i}" x="{x_left - 8}" y="{y}" text-anchor="end">{text}</text>')
        parts.append(f'<text class="tk{i}" x="{x_right + 8}" y="{y}">{text}</text>')
    parts.append("</svg>")
    return "".join(parts)


def legend_html(heads: list[int]) -> str:
    """Head names, each after a square in its :func:`head_colour` (sized in rem: they follow the lecture font scale).
    The names themselves are in the page's text colour: several head colours are too pale to read as text. The styles
    are classes of ``viz_ui/app/base.css`` (``.hv-head``, ``.hv-swatch``); only the square's colour is its own."""
    return " ".join(f'<span class="hv-head"><span class="hv-swatch" style="background:{head_colour(h)}"></span> '
                    f'head {h}</span>' for h in heads)


def readable_threshold(patterns: np.ndarray, heads: list[int], threshold: float = THRESHOLD) -> float:
    """``threshold`` when at least one line reaches it, else a lower cutoff that draws the strongest lines: half the
    largest weight of ``heads`` in the window (0 draws nothing when every weight is 0)."""
    if not heads or n_lines(patterns, heads, threshold):
        return threshold
    top = float(max(patterns[h].max() for h in heads))
    return top / 2 if top > 0 else threshold
