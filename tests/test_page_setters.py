"""Click callbacks change the shared selections through their public setters (viz_ui.app.layout: set_ablated_heads,
set_layer_head), and the pages show the new selection: driven through Streamlit's AppTest with a click on a figure
reported as the browser reports it (the live chart's click event)."""

from streamlit.testing.v1 import AppTest

from conftest import report_component_event, shown_figures
from helpers import open_page

TEXT = "Sue gave Tom a red ball. He said"


def click(at: AppTest, key_start: str, point_index: int, curve_number: int = 1) -> AppTest:
    """Run the app as a click on point ``point_index`` of trace ``curve_number`` of the figure whose key starts with
    ``key_start`` makes Streamlit run it: a live chart's click event (viz_ui/app/live_chart.js), as its JavaScript
    sends it."""
    chart = next(c for c in at.get("bidi_component") if c.proto.id.rsplit("-", 1)[-1].startswith(key_start))
    key = chart.proto.id.rsplit("-", 1)[-1]
    at = report_component_event(at, key, "click", {"curve_number": curve_number, "point_index": point_index,
                                                   "x": None, "y": None})
    assert not at.exception, [e.value for e in at.exception]
    return at


def titles(at: AppTest) -> list[str]:
    return [fig["layout"]["title"]["text"] for fig in shown_figures(at) if "text" in fig["layout"].get("title", {})]


def test_a_click_on_the_effect_map_switches_the_head_off_and_a_second_click_back_on():
    at = open_page("pages/interventions.py", query={"text": TEXT}, start=False, timeout=300)
    n_heads = 8  # the shipped tinystories-6l: 6 layers × 8 heads
    assert at.multiselect(key="ablate").value == []
    assert not any(t.startswith("Intact vs") for t in titles(at))
    at = click(at, "effect_map", 2 * n_heads + 5)  # the cell of layer 2, head 5
    assert at.multiselect(key="ablate").value == ["L2H5"]
    assert at.query_params["ablate"] == "L2H5"
    assert any(t.startswith("Intact vs L2H5 off") for t in titles(at))  # the ablated run of that head is shown
    assert any(s.value.startswith("The output") and "intact vs ablated" in s.value for s in at.subheader)
    at = click(at, "effect_map", 0)  # layer 0, head 0 as well: both are off, in order
    assert at.multiselect(key="ablate").value == ["L0H0", "L2H5"]
    assert any(t.startswith("Intact vs L0H0, L2H5 off") for t in titles(at))
    at = click(at, "effect_map", 2 * n_heads + 5)  # the same cell again: back on
    assert at.multiselect(key="ablate").value == ["L0H0"]
    assert at.query_params["ablate"] == "L0H0"


def test_a_click_on_the_attention_grid_selects_that_layer_and_head():
    at = open_page("pages/attention.py", query={"text": TEXT, "layer": "0", "head": "0"}, start=False, timeout=300)
    n_heads = 8
    at = click(at, "attn_grid", 3 * n_heads + 6)
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (3, 6)
    assert any(t.startswith("Layer 3, head 6") for t in titles(at))
