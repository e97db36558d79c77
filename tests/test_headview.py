"""The head view SVG: one line per (head, query, key) above the threshold, opacity = weight."""

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from viz_ui.views.head_view import head_colour, head_view_svg, svg_height

NS = "{http://www.w3.org/2000/svg}"


def test_lines_follow_the_weights_and_heads():
    patterns = np.zeros((3, 3, 3))
    patterns[0] = [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]
    patterns[2] = [[1, 0, 0], [0.995, 0.005, 0], [0, 0, 1]]
    svg = head_view_svg(patterns, ["<a>", "b", "c"], heads=[0, 2], first=10)
    root = ET.fromstring(svg)  # well-formed XML: labels are escaped
    lines = root.findall(f"{NS}line")
    assert len(lines) == 6 + 3  # head 0: every non-zero weight; head 2: the 0.005 weight is below the threshold
    by_class = {(l.get("class"), l.get("stroke")): float(l.get("stroke-opacity")) for l in lines}
    share = 1 / np.sqrt(2)
    assert by_class[("q2 k1", head_colour(0))] == round(0.3 * share, 3)
    assert by_class[("q1 k0", head_colour(2))] == round(0.995 * share, 3)
    texts = [t.text for t in root.findall(f"{NS}text")]
    assert "10 <a>" in texts and "12 c" in texts
    assert int(root.get("height")) == svg_height(3)
    # hovering query token 1 hides every line that does not start there
    assert "#hv:has(.tq1:hover) line:not(.q1){display:none}" in svg


def test_one_head_only():
    patterns = np.tile(np.eye(4)[None], (2, 1, 1))
    svg = head_view_svg(patterns, list("abcd"), heads=[1], uid="x")
    assert len(re.findall("<line ", svg)) == 4 and head_colour(0) not in svg.split("</style>")[1]


def test_the_view_scales_with_the_lecture_font_and_follows_the_dark_theme():
    patterns = np.tile(np.eye(3)[None], (1, 1, 1))
    small = ET.fromstring(head_view_svg(patterns, list("abc"), heads=[0]))
    big = ET.fromstring(head_view_svg(patterns, list("abc"), heads=[0], scale=2.0, theme="dark"))
    assert int(big.get("height")) == svg_height(3, 2.0) == 2 * int(small.get("height"))
    assert int(big.get("width")) == 2 * int(small.get("width"))
    style = big.find(f"{NS}style").text
    assert "font:30px monospace" in style and "fill:#fafafa" in style
    assert big.find(f"{NS}rect").get("fill") == "#0e1117" and small.find(f"{NS}rect").get("fill") == "#ffffff"
    ys = [float(l.get("y1")) for l in big.findall(f"{NS}line")]
    assert ys == [2 * y for y in (float(l.get("y1")) for l in small.findall(f"{NS}line"))]


def test_a_window_of_small_weights_gets_a_lower_cutoff_and_relative_opacity():
    from viz_ui.views.head_view import THRESHOLD, n_lines, readable_threshold
    patterns = np.full((2, 4, 4), 0.002)
    patterns[1, 3, 2] = 0.008
    assert n_lines(patterns, [0, 1]) == 0  # at the default cutoff nothing would be drawn
    cutoff = readable_threshold(patterns, [0, 1])
    assert cutoff == pytest.approx(0.004) and n_lines(patterns, [0, 1], cutoff) == 1
    svg = ET.fromstring(head_view_svg(patterns, list("abcd"), [1], threshold=cutoff, full=0.008))
    (line,) = svg.findall(f"{NS}line")
    assert line.get("class") == "q3 k2" and float(line.get("stroke-opacity")) == 1.0
    patterns[0, 0, 0] = 0.5
    assert readable_threshold(patterns, [0, 1]) == THRESHOLD  # lines reach the cutoff: it stays


def test_the_page_starts_with_one_salient_head_and_offers_no_download_in_lecture_mode():
    from helpers import open_page
    from viz_ui.analysis.heads import salience
    from viz_ui.app.state import get_trace
    at = open_page("pages/head_view.py")
    trace = get_trace("assets/models/tinystories-6l.safetensors", at.text_area(key="text").value)
    best = int(salience(trace.arrays["blocks.0.attn.hook_pattern"]).argmax())
    assert at.session_state["hv_heads_L0"] == [best]
    assert [b.proto.label for b in at.get("download_button")].count("Download as SVG") == 1
    at = open_page("pages/head_view.py", query={"lecture": "true"})
    assert not at.get("download_button")
    svg = at.get("iframe")[0].proto.srcdoc  # lecture mode's default font scale is 1.5
    assert f"font:{round(15 * 1.5)}px" in svg and f'width="{round(640 * 1.5)}"' in svg
