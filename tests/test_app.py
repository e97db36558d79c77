"""Every page of the app on the shipped model, driven through Streamlit's AppTest."""


import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import ROOT, plotly_array
from helpers import PAGES, figure_titled, figures, open_page
from viz_model import load_model


def chips(at: AppTest) -> str:
    return "".join(h.proto.body for h in at.get("html"))


@pytest.mark.parametrize("page", [None, *PAGES])
def test_every_page_renders_on_the_shipped_model(page):
    at = open_page(page)
    assert at.title and not at.error
    if page not in (None, "pages/tokens.py", "pages/head_view.py", "pages/walkthrough.py",  # chips/SVG, no Plotly
                    "pages/encoder_decoder.py"):  # explains that the shipped default model has no encoder
        assert figures(at)


def test_typed_text_reaches_every_page_and_survives_page_switches():
    at = open_page("pages/tokens.py", text="The dog ran to the dog.")
    table = at.dataframe[0].value
    assert "".join(table["characters"].map(eval)) == "The dog ran to the dog."
    for page in PAGES:
        at.switch_page(page).run()
        assert at.text_area(key="text").value == "The dog ran to the dog."


def test_attention_figure_shows_the_models_own_pattern():
    text = "The cat sat on the mat. The cat sat."
    at = open_page("pages/attention.py", text=text)
    at.selectbox(key="layer").set_value(1).run()
    at.selectbox(key="head").set_value(2).run()
    model, tok = load_model()
    _, cache = model.run_with_cache(torch.tensor([tok.encode(text).ids]))
    expected = cache["blocks.1.attn.hook_pattern"][0, 2].numpy()
    single = plotly_array(figure_titled(at, "Layer 1, head 2")["data"][0]["z"])
    np.testing.assert_allclose(single, expected, atol=1e-6)
    assert single.shape[0] == len(tok.encode(text).ids)  # repeated tokens keep their own rows
    at.radio(key="attn_kind").set_value("scores (scaled, masked, before softmax)").run()
    scores = figure_titled(at, "Layer 1, head 2")["data"][0]
    assert np.isnan(plotly_array(scores["z"])[0, 1])  # masked: drawn blank
    assert scores["hoverongaps"] is False  # and without a hover label


def test_temperature_zero_is_greedy_and_the_maximum_is_fine():
    at = open_page("pages/output.py")
    at.slider(key="temperature").set_value(0.0).run()
    bars = plotly_array(figures(at)[0]["data"][0]["x"])
    assert bars[0] == 1.0 and bars.sum() == 1.0
    at.slider(key="temperature").set_value(3.0).run()
    assert not at.exception
    assert plotly_array(figures(at)[0]["data"][0]["x"]).max() < 0.5


def test_generation_is_reproducible_with_a_seed():
    runs = []
    for _ in range(2):
        at = open_page("pages/output.py")
        at.number_input(key="n_new").set_value(5).run()
        at.button[0].click().run()
        assert not at.exception
        steps = next(d.value for d in at.dataframe if "probability (as sampled)" in d.value.columns)
        runs.append(steps["id"].tolist())
    assert len(runs[0]) == 5 and runs[0] == runs[1]
    # the KV cache at work: the prompt once, then one new position per step
    kv = next(d.value for d in at.dataframe if "keys and values reused from the cache" in d.value.columns)
    n_prompt = kv["positions computed (q, k, v)"].iloc[0]
    assert kv["positions computed (q, k, v)"].tolist()[1:] == [1, 1, 1, 1]
    assert kv["keys and values reused from the cache"].tolist() == [0, n_prompt, n_prompt + 1, n_prompt + 2, n_prompt + 3]
    rows = plotly_array(figure_titled(at, "Attention of each new token")["data"][0]["z"])
    assert rows.shape == (5, n_prompt + 4)
    np.testing.assert_allclose(np.nansum(rows, axis=1), 1.0, atol=1e-5)
    assert np.isnan(rows[0, n_prompt:]).all() and not np.isnan(rows[4]).any()


@pytest.mark.parametrize("page", PAGES)
def test_empty_text_gives_a_message_not_a_traceback(page):
    at = open_page(page, text="")
    assert any("empty" in i.value for i in at.info)


def test_a_link_with_huge_text_is_cut_to_the_text_box_limit():
    at = open_page("pages/tokens.py", query={"text": "The cat sat. " * 2500})
    assert len(at.text_area(key="text").value) == 20_000 and not at.error


def test_text_beyond_the_context_is_truncated_with_a_notice():
    at = open_page("pages/attention.py", text="The cat sat on the mat. " * 200, query={"layer": "0", "head": "0"})
    assert any("only the first" in w.value for w in at.warning)
    model, tok = load_model()
    n = model.cfg.n_ctx
    ids = tok.encode("The cat sat on the mat. " * 200).ids[:n]
    _, cache = model.run_with_cache(torch.tensor([ids]))
    fig = figure_titled(at, "Layer 0, head 0")
    # more positions than a readable square: a 128-position window around the selected (last) position
    assert any("too many to draw at once" in c.value for c in at.caption)
    z = plotly_array(fig["data"][0]["z"])
    assert z.shape == (128, 128) and fig["layout"]["yaxis"]["tickvals"][0] == n - 128
    np.testing.assert_allclose(z, cache["blocks.0.attn.hook_pattern"][0, 0, n - 128:, n - 128:].numpy(), atol=1e-6)
    at.selectbox(key="query").set_value(10).run()  # the window follows the chosen position
    fig = figure_titled(at, "Layer 0, head 0")
    assert fig["layout"]["yaxis"]["tickvals"][0] == 0
    np.testing.assert_allclose(plotly_array(fig["data"][0]["z"]), cache["blocks.0.attn.hook_pattern"][0, 0, :128, :128].numpy(),
                               atol=1e-6)
    for page in ("pages/embeddings.py", "pages/block.py", "pages/head_steps.py", "pages/walkthrough.py"):
        at.switch_page(page).run()
        assert not at.exception and not at.error, page


def test_emoji_and_other_scripts():
    at = open_page("pages/tokens.py", text="Lily 🐶 said 你好 and שלום — “ok”")
    assert "&lt;F0" in chips(at)
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception


def test_text_and_model_come_from_the_link():
    at = open_page("pages/tokens.py", query={"text": "Ben found a key.", "model": "tinystories-6l"})
    assert "".join(at.dataframe[0].value["characters"].map(eval)) == "Ben found a key."
    assert at.selectbox(key="model").value == "tinystories-6l"
    at = open_page("pages/tokens.py", query={"model": "no-such-model"})  # an unknown model falls back
    assert at.selectbox(key="model").value == "tinystories-6l" and not at.error


def test_example_picker_sets_the_text():
    at = open_page()
    example = at.selectbox(key="example").options[2]
    at.selectbox(key="example").set_value(example).run()
    assert at.text_area(key="text").value == example


def test_head_summaries_open_the_step_by_step_view():
    at = open_page("pages/heads.py")
    button = next(b for b in at.button if b.label.startswith("Layer") and "induction" in b.key)
    layer, head = (int(part.split()[1]) for part in button.label.split(":")[0].split(", "))
    button.click().run()
    assert not at.exception
    assert at.title[0].value == "One head, step by step"
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (layer, head)


def test_every_figure_offers_its_data_and_the_trace_is_downloadable():
    at = open_page("pages/attention.py")
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels.count("Data (CSV)") == len(figures(at)) and "Whole trace (.npz)" in labels


def test_walkthrough_every_step_renders_and_next_moves_on():
    at = open_page("pages/walkthrough.py")
    n_steps = len(at.selectbox(key="step").options)
    assert n_steps == 11 and at.header[0].value.startswith("1 · Text")
    for step in range(2, n_steps + 1):
        next(b for b in at.button if b.label == "Next").click().run()
        assert not at.exception, (step, [e.value for e in at.exception])
        assert at.header[0].value.startswith(f"{step} · ") and at.selectbox(key="step").value == step
    assert next(b for b in at.button if b.label == "Next").disabled
    at = open_page("pages/walkthrough.py", query={"step": "4"})
    assert at.header[0].value == "4 · One attention head"


@pytest.mark.parametrize("step", range(1, 12))
def test_walkthrough_on_a_one_token_text(step):
    at = open_page("pages/walkthrough.py", text="Once", query={"step": str(step)})
    assert at.header[0].value.startswith(f"{step} · ") and not at.error
    assert "nan" not in " ".join(m.value for m in at.markdown)


@pytest.mark.parametrize("page", [None, "pages/tokens.py", "pages/attention.py"])
def test_a_rerun_keeps_every_element_in_its_place(page):
    """Streamlit replaces elements by position during a rerun and removes the left-overs only at its end: an
    element drawn on a session's first run only (once, the cold-start preload) shifted the next run's page, and
    the old text's token chips stayed on screen next to the new ones while it ran (bench/class_load.py saw it).
    The landing page is compared on the session's first and second run; the other pages (reached by switching,
    as AppTest cannot open a page first) on their first and second run after a changed text."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()  # the session's first run
    if page:
        at.switch_page(page).run()
    first = [node.type for node in at.main]
    at.text_area(key="text").set_value("A different text, typed next.").run()
    assert not at.exception and [node.type for node in at.main] == first


def test_a_long_text_stays_out_of_the_link_and_the_link_says_so():
    """20,000 CJK characters would be a 180 KB address, which the server refuses (HTTP 400) on reload."""
    text = "猫が座った。" * 3000
    at = open_page("pages/tokens.py", text=text[:20_000])
    assert "text" not in at.query_params and not at.exception
    assert any("too long for a link" in c.value for c in at.sidebar.caption)
    at.text_area(key="text").set_value("A short text.").run()
    assert at.query_params["text"] in ("A short text.", ["A short text."])
    assert not any("too long for a link" in c.value for c in at.sidebar.caption)


def test_the_landing_page_draws_the_model_from_its_own_activations():
    at = open_page(None)
    model, tok = load_model()
    mapped = figure_titled(at, "input, then")
    assert mapped["layout"]["xaxis"]["ticktext"][-1] == "MLP"
    assert len(mapped["layout"]["yaxis"]["ticktext"]) == model.cfg.n_layers + 1
    _, cache = model.run_with_cache(torch.tensor([tok.encode(at.text_area(key="text").value).ids]))
    out = figure_titled(at, "Output after")
    probs = torch.softmax(cache["hook_logits"][0, -1], -1)
    top = probs.topk(len(plotly_array(out["data"][0]["x"])))
    np.testing.assert_allclose(plotly_array(out["data"][0]["x"]), top.values.numpy(), atol=1e-5)


def test_the_sidebar_has_the_text_first_then_the_pages_in_sections_the_current_one_open():
    from viz_ui.app.navigation import SHOWN

    def walk(block, out):
        for child in block.children.values():
            out.append((child.type, getattr(child, "label", None)))
            if hasattr(child, "children"):
                walk(child, out)
        return out

    at = open_page()
    order = walk(at.sidebar, [])
    assert order.index(("text_area", "Text")) < order.index(("expander", SHOWN[0].heading))  # the text box first
    for page, section in (("app.py", "Learn the architecture"), ("pages/steering.py", "Cause and effect"),
                          ("pages/inspector.py", "Inspect a model"), ("pages/timeline.py", "Watch it learn")):
        if page != "app.py":
            at.switch_page(page).run()
        expanders = at.sidebar.expander
        assert [e.label for e in expanders] == [s.heading for s in SHOWN] + ["Classroom"]
        assert [e.label for e in expanders if e.proto.expanded] == [section], page  # the page's own section open
        for expander, shown in zip(expanders, SHOWN):
            assert [p.proto.label for p in expander.get("page_link")] == [label for _, label, _ in shown.pages]
