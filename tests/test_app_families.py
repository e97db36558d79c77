"""Every page on models of other families (GPT-2, BERT with and without a masked-LM head, Llama with
grouped-query attention and rotary positions, a checkpoint without tokenizer), put into the session the way
an upload is, and the family-specific views: rotary angles, [MASK] prediction, token-id input."""

from __future__ import annotations

import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import ROOT, plotly_array
from hf_models import bert_config, build, gpt2_config, llama_config, save
from test_app import PAGES, figure_titled, figures
from viz_model import load_model
from viz_ui.state import SessionModel

ALL_PAGES = [None, *PAGES, "pages/inspector.py"]


@pytest.fixture(scope="module")
def family_models(tmp_path_factory, tokenizer):
    """name -> (model, tokenizer): small random models converted from `transformers` folders."""
    root = tmp_path_factory.mktemp("families")
    out = {}
    specs = {"gpt2": ("GPT2LMHeadModel", gpt2_config(vocab_size=320, n_positions=64)),
             "bert-mlm": ("BertForMaskedLM", bert_config(vocab_size=320, max_position_embeddings=64)),
             "bert-bare": ("BertModel", bert_config(vocab_size=320, max_position_embeddings=64)),
             "llama-gqa": ("LlamaForCausalLM", llama_config(vocab_size=320))}
    for name, (cls, cfg) in specs.items():
        model, _ = load_model(save(build(cls, cfg), root / name))
        out[name] = (model, tokenizer)
    out["no-tokenizer"] = (out["gpt2"][0], None)
    return out


def open_with(models, name: str, page: str | None, text: str = "The cat sat on the mat. The cat") -> AppTest:
    model, tok = models[name]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    key = f"upload:{name}"
    at.session_state["_session_models"] = {key: SessionModel(name, model, tok, name)}
    at.session_state["_model"] = name
    at.session_state["_text"] = text
    at.run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="model").value == name
    return at


@pytest.mark.parametrize("name", ["gpt2", "bert-mlm", "bert-bare", "llama-gqa"])
@pytest.mark.parametrize("page", ALL_PAGES)
def test_every_page_renders_on_every_family(family_models, name, page):
    at = open_with(family_models, name, page)
    assert not at.error, [e.value for e in at.error]


def test_checkpoint_without_tokenizer_takes_token_ids(family_models):
    at = open_with(family_models, "no-tokenizer", "pages/attention.py", text="5 17 17 300 2")
    assert not at.error
    assert any("no tokenizer" in i.value for i in at.info)
    fig = figure_titled(at, "Layer 0, head 0")
    assert fig["layout"]["yaxis"]["ticktext"][:3] == ["0 #5", "1 #17", "2 #17"]
    at = open_with(family_models, "no-tokenizer", "pages/tokens.py", text="5 seventeen")
    assert any("seventeen" in e.value for e in at.error)
