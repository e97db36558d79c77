"""The head view SVG: one line per (head, query, key) above the threshold, opacity = weight."""

import re
import xml.etree.ElementTree as ET

import numpy as np

from viz_ui.headview import head_colour, head_view_svg, svg_height

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
