"""The Cause and effect page on the shipped models, through Streamlit's AppTest: what it shows is recomputed here
with the public API (and the generation with a plain greedy loop over run_with_hooks, no KV cache), and each
exported script is run and must print the page's own numbers."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

import viz_model
from conftest import ROOT, plotly_array, shown_figures
from helpers import figure_titled, open_page
from viz_model import ablation, load_model, patching
from viz_ui.analysis.text_trace import token_label

TEXT = "Sue gave Tom a red ball. He said"  # 9 tokens: quick sweeps


def page(**query) -> AppTest:
    """The interventions page opened with a link's query parameters (the page runs first, without the landing page)."""
    return open_page("pages/interventions.py", query=query, start=False, timeout=300)


def exported(at: AppTest, shipped, monkeypatch) -> dict:
    """Run the page's exported script (its st.code block in Python) and return its variables and printout. The
    script's ``load_model`` must name the shipped checkpoint, whose already loaded copy it gets (loading is tested
    elsewhere; this saves seconds)."""
    source = next(c.value for c in at.code if c.language == "python")

    def load(path, **kw):  # kw: the server's settings when not the defaults (a GPU: device="auto")
        assert Path(path) == ROOT / "assets" / "models" / "tinystories-6l.safetensors"
        return shipped[:2] if not kw else load_model(path, **kw)
    monkeypatch.setattr(viz_model, "load_model", load)
    ns, out = {"__name__": "__exported__"}, io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<exported>", "exec"), ns)  # the script the user downloads, as it is
    ns["printed"] = out.getvalue()
    return ns


@pytest.fixture(scope="module")
def shipped():
    model, tok = load_model(ROOT / "assets" / "models" / "tinystories-6l.safetensors")
    ids = {token_label(tok, i): i for i in range(model.cfg.d_vocab)}
    return model, tok, ids


@pytest.fixture(scope="module")
def ablation_page():
    return page(text=TEXT, ablate="L0H3,L5H1")


def test_ablating_heads_shows_what_ablate_heads_computes(ablation_page, shipped):
    model, tok, ids = shipped
    tokens = torch.tensor([tok.encode(TEXT).ids])
    heads = [(0, 3), (5, 1)]
    with torch.no_grad():
        p_intact = torch.softmax(model(tokens)[0, -1], -1)
        p_ablated = torch.softmax(ablation.ablate_heads(model, tokens, heads, "zero")[0, -1], -1)
    bars = figure_titled(ablation_page, "Intact vs L0H3, L5H1 off")
    shown = [ids[label.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")]
             for label in bars["layout"]["yaxis"]["ticktext"]]
    np.testing.assert_allclose(plotly_array(bars["data"][0]["x"]), p_intact[shown].numpy(), atol=1e-5)
    np.testing.assert_allclose(plotly_array(bars["data"][1]["x"]), p_ablated[shown].numpy(), atol=1e-5)
    assert set(p_ablated.topk(8).indices.tolist()) <= set(shown)  # the ablated run's own top tokens are listed
    # the effect map: a head ablated on top of the two changes log p(intact top token) by its cell (one run each)
    effects, top = plotly_array(figure_titled(ablation_page, "Each head switched off")["data"][0]["z"]), int(p_intact.argmax())
    assert effects.shape == (6, 8) and effects[0, 3] == effects[5, 1] == 0
    for layer, head in [np.unravel_index(np.abs(effects).argmax(), effects.shape), (2, 6)]:
        with torch.no_grad():
            alone = torch.log_softmax(ablation.ablate_heads(model, tokens, heads + [(layer, head)])[0, -1], -1)[top]
        assert effects[layer, head] == pytest.approx(float(alone - p_ablated[top].log()), abs=1e-4)
    # the generation under the ablation: a plain greedy loop over run_with_hooks, no KV cache
    hooks, seq = ablation.head_ablation_hooks(model, heads, "zero"), tokens[0].tolist()
    with torch.no_grad():
        for _ in range(8):
            seq.append(int(model.run_with_hooks(torch.tensor([seq]), hooks)[0, -1].argmax()))
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)  # noqa: E731
    continuation = decode(seq)[len(decode(tokens[0].tolist())):]
    assert f"ablated: {continuation!r}" in next(c.value for c in ablation_page.code if c.value.startswith("intact"))


def test_exported_scripts_load_the_model_as_the_server_does(shipped, monkeypatch):
    """A server started with ``--dtype auto`` (here ``VIZ_DTYPE``) exports ``load_model(..., dtype="auto")`` (on a GPU
    also ``device="auto"``), and the script so loaded prints the page's numbers."""
    from viz_ui.views.code_interventions import load_arguments
    assert load_arguments("float32", "cpu") == ""
    assert load_arguments("bfloat16", "cpu") == 'dtype="bfloat16"'
    assert load_arguments("float32", "cuda") == 'device="auto"'
    monkeypatch.setenv("VIZ_DTYPE", "auto")
    at = page(text=TEXT, ablate="L0H3")
    source = next(c.value for c in at.code if c.language == "python")
    device = ', device="auto"' if torch.cuda.is_available() else ""
    assert f"tinystories-6l.safetensors', dtype=\"auto\"{device})" in source, source[:600]
    ns = exported(at, shipped, monkeypatch)
    bars = figure_titled(at, "Intact vs L0H3 off")
    np.testing.assert_allclose(ns["p_ablated"][ns["shown"]].cpu().numpy(), plotly_array(bars["data"][1]["x"]), atol=1e-6)


def test_the_exported_ablation_script_prints_the_pages_numbers(ablation_page, shipped, monkeypatch):
    ns = exported(ablation_page, shipped, monkeypatch)
    bars = figure_titled(ablation_page, "Intact vs L0H3, L5H1 off")
    # the script loads the model as the server did (on a GPU: device="auto"), so the numbers are the same computation
    np.testing.assert_allclose(ns["p_ablated"][ns["shown"]].cpu().numpy(), plotly_array(bars["data"][1]["x"]), atol=1e-6)
    np.testing.assert_allclose(ns["effects"].cpu().numpy(), plotly_array(figure_titled(ablation_page, "Each head")["data"][0]["z"]),
                               atol=1e-6)
    assert f"{float(ns['p_ablated'][ns['shown'][0]]):9.4f}" in ns["printed"]


def test_patching_heatmaps_are_normalised_patching_results_and_the_exported_script_prints_them(shipped, monkeypatch):
    """The exported script calls patching.get_act_patch_* and normalise on the texts, tokenized by itself; its
    inputs are checked here against the page's widgets, and its results against every heatmap (one sweep, not two:
    the test suite's time is short)."""
    model, tok, _ = shipped
    at = page(text=TEXT, part="patching", cell="resid_pre:2:7")
    corrupted_text = at.text_area(key="corrupt").value
    assert corrupted_text != TEXT and not at.error
    ns = exported(at, shipped, monkeypatch)
    assert ns["clean_tokens"].tolist() == [tok.encode(TEXT).ids]
    assert ns["corrupted_tokens"].tolist() == [tok.encode(corrupted_text).ids] and ns["pos"] == 8
    assert (ns["answer"], ns["wrong"]) == (at.selectbox(key="answer").value, at.selectbox(key="wrong").value)
    with torch.no_grad():  # the metric of each run, recomputed
        clean_logits, bad_logits = model(ns["clean_tokens"])[0, -1], model(ns["corrupted_tokens"])[0, -1]
    assert ns["clean_value"] == pytest.approx(float(clean_logits[ns["answer"]] - clean_logits[ns["wrong"]]), abs=1e-4)
    assert ns["corrupted_value"] == pytest.approx(float(bad_logits[ns["answer"]] - bad_logits[ns["wrong"]]), abs=1e-4)
    for site, title in [("resid_pre", "Patching the residual stream"), ("attn_out", "Patching each layer's attention"),
                        ("mlp_out", "Patching each layer's MLP"), ("head", "Patching each head")]:
        expected = patching.normalise(ns["results"][site], ns["clean_value"], ns["corrupted_value"])
        np.testing.assert_allclose(plotly_array(figure_titled(at, title)["data"][0]["z"]), expected.cpu().numpy(), atol=1e-5)
    assert float(expected.abs().max()) > 0.1  # a real effect, not a page of zeros
    lens = figure_titled(at, "Patch lens")  # the cell from the link: its 12 largest downstream changes, largest first
    np.testing.assert_allclose(plotly_array(lens["data"][0]["x"]), sorted(ns["moved"].values(), reverse=True)[:12],
                               atol=1e-4)
    assert "resid_pre (rows = layers" in ns["printed"] and "metric: clean" in ns["printed"]


def test_texts_of_different_token_counts_get_a_clear_message_and_both_token_lists():
    at = page(text=TEXT, part="patching", corrupt=TEXT + " the")
    assert "has 9 tokens and the corrupted one 10" in at.error[0].value
    table = at.table[0].value if at.table else at.dataframe[0].value
    assert list(table["differs"]).count("◆ differs") == 1 and table["corrupted"].iloc[-1] == "·the"
    assert not shown_figures(at)


@pytest.fixture(scope="module")
def attribution_page():
    return page(text=TEXT, part="attribution")


def test_attribution_shows_a_sum_equal_to_the_models_logit(attribution_page, shipped):
    model, tok, _ = shipped
    total, logit, _ = (float(m.value) for m in attribution_page.metric)
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode(TEXT).ids]))[0, -1]
    assert logit == pytest.approx(float(logits.max()), abs=1e-4)  # the default token: the top prediction
    assert total == pytest.approx(logit, abs=1e-3)
    bars = plotly_array(figure_titled(attribution_page, "Direct contribution")["data"][0]["y"])
    assert bars.sum() == pytest.approx(logit, abs=1e-3) and len(bars) == 6 * (8 + 2) + 3  # heads, b_O, MLP; 3 more


def test_the_exported_attribution_script_prints_the_pages_numbers(attribution_page, shipped, monkeypatch):
    ns = exported(attribution_page, shipped, monkeypatch)
    bars = figure_titled(attribution_page, "Direct contribution")
    np.testing.assert_allclose(list(ns["dla"].values()), plotly_array(bars["data"][0]["y"]), rtol=1e-5, atol=1e-5)  # float32 sums: thread counts reorder them
    assert f"{ns['logit']:.4f}" in ns["printed"]


def test_the_encoder_decoder_model_ablates_and_patches_and_refuses_attribution_with_its_reason():
    at = page(model="dates-iso", text="3 March 2021", ablate="L1H2")
    assert shown_figures(at) and not at.error
    assert any("ablated:" in c.value for c in at.code)  # the whole output, generated under the ablation
    at.radio(key="part").set_value("attribution").run()
    assert not at.exception
    assert any("needs a pre-LN model" in i.value.replace("\\", "") for i in at.info)
