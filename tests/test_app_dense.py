"""Pages on the further dense families (issue 16): each renders without error, and the views that read a family's
mechanism say what the model does (soft-capped scores before and after the cap, partial rotary, parallel residual,
sandwich and output norms, encoder wording)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import plotly_array
from hf_models import build, save, transformers
from helpers import PAGES, figure_titled, open_with_model
from viz_model import load_model

V = 320  # the test tokenizer's vocabulary
SPECS = {
    "llama3": ("LlamaForCausalLM", lambda: transformers.LlamaConfig(
        vocab_size=V, hidden_size=50, intermediate_size=76, num_hidden_layers=2, num_attention_heads=5,
        num_key_value_heads=1, head_dim=10, max_position_embeddings=256,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "qwen3": ("Qwen3ForCausalLM", lambda: transformers.Qwen3Config(
        vocab_size=V, hidden_size=50, intermediate_size=76, num_hidden_layers=2, num_attention_heads=5,
        num_key_value_heads=5, head_dim=10, max_position_embeddings=256)),
    "olmo2": ("Olmo2ForCausalLM", lambda: transformers.Olmo2Config(
        vocab_size=V, hidden_size=60, intermediate_size=76, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=3, max_position_embeddings=256)),
    "neox": ("GPTNeoXForCausalLM", lambda: transformers.GPTNeoXConfig(
        vocab_size=V, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=58,
        max_position_embeddings=64, rotary_pct=0.5)),
    "opt": ("OPTForCausalLM", lambda: transformers.OPTConfig(
        vocab_size=V, hidden_size=30, num_hidden_layers=2, ffn_dim=46, num_attention_heads=5,
        max_position_embeddings=64, word_embed_proj_dim=22, do_layer_norm_before=False)),
    "distilbert": ("DistilBertForMaskedLM", lambda: transformers.DistilBertConfig(
        vocab_size=V, dim=30, n_layers=2, n_heads=5, hidden_dim=44, max_position_embeddings=64)),
    "roberta": ("RobertaForMaskedLM", lambda: transformers.RobertaConfig(
        vocab_size=V, hidden_size=42, num_hidden_layers=2, num_attention_heads=3, intermediate_size=50,
        max_position_embeddings=66, type_vocab_size=1)),
    "gemma": ("GemmaForCausalLM", lambda: transformers.GemmaConfig(
        vocab_size=V, hidden_size=42, intermediate_size=62, num_hidden_layers=3, num_attention_heads=3,
        num_key_value_heads=1, head_dim=14, max_position_embeddings=64)),
    "gemma2": ("Gemma2ForCausalLM", lambda: transformers.Gemma2Config(
        vocab_size=V, hidden_size=42, intermediate_size=62, num_hidden_layers=3, num_attention_heads=3,
        num_key_value_heads=1, head_dim=14, max_position_embeddings=64, sliding_window=4, query_pre_attn_scalar=20,
        attn_logit_softcapping=1.5, final_logit_softcapping=2.0)),
    "phi3": ("Phi3ForCausalLM", lambda: transformers.Phi3Config(
        vocab_size=V, hidden_size=50, intermediate_size=66, num_hidden_layers=2, num_attention_heads=5,
        num_key_value_heads=5, max_position_embeddings=64, sliding_window=6, partial_rotary_factor=0.4,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    "longrope": ("Phi3ForCausalLM", lambda: transformers.Phi3Config(  # LongRoPE: long factors above 8 tokens
        vocab_size=V, hidden_size=50, intermediate_size=66, num_hidden_layers=2, num_attention_heads=5,
        num_key_value_heads=5, max_position_embeddings=64, original_max_position_embeddings=8, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, rope_parameters={"rope_type": "longrope", "rope_theta": 100.0,
                                                         "short_factor": [1.0, 1.5, 2.5, 4.0, 6.0],
                                                         "long_factor": [1.3, 3.0, 7.0, 11.0, 20.0]})),
    "t5": ("T5ForConditionalGeneration", lambda: transformers.T5Config(
        vocab_size=V, d_model=36, d_kv=10, d_ff=50, num_layers=2, num_decoder_layers=2, num_heads=3,
        relative_attention_num_buckets=12, relative_attention_max_distance=20, feed_forward_proj="gated-gelu",
        n_positions=128)),
}


def dense_models(root, tokenizer, names=None) -> dict:
    """name -> (model, tokenizer), each converted from a saved `transformers` folder through `load_model`."""
    return {name: (load_model(save(build(cls, make()), root / name))[0], tokenizer)
            for name, (cls, make) in SPECS.items() if names is None or name in names}


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer):
    return dense_models(tmp_path_factory.mktemp("dense"), tokenizer,
                        ("gemma2", "neox", "olmo2", "roberta", "t5", "longrope"))


@pytest.mark.parametrize("page", [None, *PAGES])
def test_every_page_renders_on_gemma2(models, page):
    """Gemma 2 holds most new switches at once: sandwich norms, GeGLU, soft caps, a divisor of its own,
    alternating windows, scaled embeddings (the other families were run through every page by hand). The attention
    page writes Gemma 2's own score: q·k divided by √query_pre_attn_scalar (not √d_k), then soft-capped."""
    at = open_with_model(models, "gemma2", page, head=(0, 0), errors=False)
    if page == "pages/attention.py":
        cfg, text = models["gemma2"][0].cfg, " ".join(m.value for m in at.markdown)
        assert cfg.attn_scale == pytest.approx(20 ** 0.5) and cfg.attn_softcap == 1.5
        assert "Left: the scores 1.5·tanh(q·k/4.472 / 1.5) for *every* pair" in text and "√d_k for" not in text
        assert "divided by 4.472, this model's own divisor" in text and "soft-capped" in text


def test_soft_capped_scores_are_shown_before_and_after_the_cap(models):
    at = open_with_model(models, "gemma2", "pages/head_steps.py", head=(0, 0), errors=False)
    table = next(d.value for d in at.dataframe if "q·k" in d.value.columns)
    cap = models["gemma2"][0].cfg.attn_softcap
    before, after = table["q·k / s"].to_numpy(), table[f"c·tanh(· / c), c = {cap:g}"].to_numpy()
    np.testing.assert_allclose(after, cap * np.tanh(before / cap), atol=1e-6)
    visible = table["mask"] == "0"
    np.testing.assert_allclose(after[visible], table["score"][visible].astype(float), atol=1e-4)  # the model's own
    assert np.abs(before).max() > cap > np.abs(after).max()  # the cap bites in this tiny model
    assert "soft-capped" in " ".join(m.value for m in at.markdown)


def test_partial_rotary_and_parallel_residual_are_explained(models):
    at = open_with_model(models, "neox", "pages/embeddings.py", head=(0, 0), errors=False)
    cfg = models["neox"][0].cfg
    assert any(f"only the first {cfg.d_rotary} of the {cfg.d_head} dimensions" in i.value for i in at.info)
    at = open_with_model(models, "neox", "pages/block.py", head=(0, 0), errors=False)
    assert any("Parallel residual" in i.value for i in at.info)


def test_output_norms_are_shown_with_their_inputs(models):
    """OLMo 2 norms only the sub-layers' outputs: the block page shows ln1_post's input (the attention's raw
    output, recomputed from hook_z and W_O) and its output, which must be RMSNorm(input) * w."""
    model = models["olmo2"][0]
    at = open_with_model(models, "olmo2", "pages/block.py", head=(0, 0), errors=False)
    assert "output-norm" in " ".join(m.value for m in at.markdown)
    before, after = plotly_array(figure_titled(at, "ln1_post (")["data"][0]["z"])
    w = model.blocks[0].ln1_post.w.detach().numpy()
    expected = before / np.sqrt((before ** 2).mean() + model.cfg.layer_norm_eps) * w
    np.testing.assert_allclose(after, expected, atol=1e-4)
    assert np.abs(before - after).max() > 0.1  # the input is not the output


def test_roberta_is_described_as_an_encoder(models):
    opened = [open_with_model(models, "roberta", page, head=(0, 0), errors=False)
              for page in ("pages/output.py", "pages/head_steps.py", None)]
    words = " ".join(m.value for at in opened for m in (*at.markdown, *at.caption, *at.info))
    assert "next token" not in words.lower() and "encoder" in words.lower()


def test_t5_relative_position_bias_as_a_matrix_and_in_the_scores(models):
    model = models["t5"][0]
    at = open_with_model(models, "t5", "pages/embeddings.py", head=(0, 0), errors=False)
    shown = plotly_array(figure_titled(at, "Relative position bias of head 0")["data"][0]["z"])
    n = shown.shape[0]
    rel = model.encoder.rel_pos  # the page opens on the encoder stack: buckets in both directions
    np.testing.assert_allclose(shown, rel.W_rel[rel.buckets(n, n), 0].detach().numpy(), atol=1e-6)
    assert not np.allclose(shown, shown.T)
    at = open_with_model(models, "t5", "pages/head_steps.py", head=(0, 0), errors=False)
    table = next(d.value for d in at.dataframe if "q·k" in d.value.columns)
    visible = (table["mask"] == "0").to_numpy()
    total = (table["q·k"] + table["+ position bias"]).to_numpy()
    np.testing.assert_allclose(total[visible], table["score"][visible].astype(float), atol=1e-4)
    assert "does not divide" in " ".join(m.value for m in at.markdown)


@pytest.mark.parametrize("text, which", [("The cat sat", "short"), ("The cat sat on the mat. The cat", "long")])
def test_longrope_pages_show_the_frequencies_the_text_uses(models, tokenizer, text, which):
    """A Phi-3 with LongRoPE: the angle heatmap holds the angles of the factor list this text's length selects (short
    up to 8 tokens, long beyond), the page says which, and the relative-score curve passes through the score the model
    recorded (cos and sin carry the attention factor); the step-by-step page names the list too."""
    from viz_model.rotary import scaled_freqs
    model = models["longrope"][0]
    n = len(tokenizer.encode(text).ids)
    assert (n > 8) == (which == "long")
    at = open_with_model(models, "longrope", "pages/embeddings.py", text, head=(0, 0), errors=False)
    assert f"This text has {n} tokens" in " ".join(c.value for c in at.caption)
    assert f"it uses the {which} factors" in " ".join(c.value for c in at.caption)
    angles = plotly_array(figure_titled(at, "Rotation angle")["data"][0]["z"])
    expected = np.mod(np.arange(n)[:, None] * scaled_freqs(model.cfg, n).numpy()[None, :], 2 * np.pi)
    np.testing.assert_allclose(angles, expected, atol=1e-5)
    curve = figure_titled(at, "Layer 0, head 0: score")["data"]
    delta, recorded = curve[1]["x"][0], curve[1]["y"][0]
    assert abs(plotly_array(curve[0]["y"])[delta] - recorded) <= 1e-4
    at = open_with_model(models, "longrope", "pages/head_steps.py", text, head=(0, 0), errors=False)
    assert any(f"it uses the {which} factors" in i.value for i in at.info)


def test_longrope_generation_recomputes_the_cache_when_the_text_outgrows_the_short_factors(models, tokenizer):
    """From 5 tokens, the 5th step runs 9 positions: past the original context of 8, so it computes all of them
    again (the cached keys were turned with the short factors) and the page says why."""
    at = open_with_model(models, "longrope", "pages/output.py", "The cat sat", head=(0, 0), errors=False)
    at.number_input(key="n_new").set_value(5).run()
    at.button[0].click().run()
    assert not at.exception
    kv = next(d.value for d in at.dataframe if "keys and values reused from the cache" in d.value.columns)
    assert kv["positions computed (q, k, v)"].tolist() == [5, 1, 1, 1, 9]
    assert kv["keys and values reused from the cache"].tolist() == [0, 5, 6, 7, 0]
    assert any("Step 5 computed all 9 positions again" in c.value for c in at.caption)


def test_t5_score_wording_no_division_a_bias_and_none_in_cross_attention(models):
    """The attention page writes the scores T5 computes (q·k, not divided, plus its relative position bias); the
    encoder-decoder page says its cross-attention has no position bias (Gemma 2's wording: the test above)."""
    def words(at):
        return " ".join(m.value for m in at.markdown)

    at = open_with_model(models, "t5", "pages/attention.py", head=(0, 0), errors=False)
    text = words(at)
    assert "√d_k for" not in text and "Left: the scores q·k + b for *every* pair" in text
    assert "not divided by √d_k" in text and "relative position bias b" in text
    assert figure_titled(at, "Layer 0, head 0: attention weights softmax(q·k + b)")
    cross = words(open_with_model(models, "t5", "pages/encoder_decoder.py", head=(0, 0), errors=False))
    assert "its cross-attention adds **no relative position bias**" in cross
