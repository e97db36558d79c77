"""Residual stream, LayerNorm statistics, feed-forward neurons and the logit lens."""

import numpy as np
import pytest
import torch

from conftest import small_model
from viz_ui.analysis.block import layernorm_stats, logit_lens, residual_norms, sublayer_norms, top_neurons
from viz_ui.views.figures import stage_heatmap
from viz_ui.analysis.text_trace import run_trace

TEXT = "Sara had a small cat. The cat was soft."


@pytest.fixture
def traced(tokenizer):
    model = small_model(seed=2)
    return model, run_trace(model, tokenizer, TEXT)


def test_residual_norms_follow_the_stream(traced):
    model, trace = traced
    norms, names = residual_norms(trace, model.cfg.n_layers)
    assert norms.shape == (2 * model.cfg.n_layers + 1, trace.n_tokens) and len(names) == len(norms)
    embed = trace.arrays["hook_embed"] + trace.arrays["hook_pos_embed"]
    np.testing.assert_allclose(norms[0], np.sqrt((embed**2).sum(-1)), rtol=1e-5)
    last = trace.arrays["blocks.1.hook_resid_pre"] + trace.arrays["blocks.1.hook_attn_out"] + trace.arrays["blocks.1.hook_mlp_out"]
    np.testing.assert_allclose(norms[-1], np.sqrt((last**2).sum(-1)), rtol=1e-4)
    adds, _ = sublayer_norms(trace, model.cfg.n_layers)
    np.testing.assert_allclose(adds[3], np.sqrt((trace.arrays["blocks.1.hook_mlp_out"] ** 2).sum(-1)), rtol=1e-5)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_layernorm_stats_before_and_after(tokenizer, placement):
    model = small_model(norm_placement=placement)
    with torch.no_grad():  # a plain LayerNorm (w = 1, b = 0): the output has mean 0 and variance ~1
        for block in model.blocks:
            for ln in (block.ln1, block.ln2):
                ln.w.fill_(1.0)
                ln.b.zero_()
    trace = run_trace(model, tokenizer, TEXT)
    ln1, ln2 = layernorm_stats(trace, 1, 3, placement)
    resid_pre = trace.arrays["blocks.1.hook_resid_pre"][3]
    expected_in = resid_pre if placement == "pre" else resid_pre + trace.arrays["blocks.1.hook_attn_out"][3]
    np.testing.assert_allclose(ln1.before, expected_in, rtol=1e-6)
    for stats in (ln1, ln2):
        assert stats.summary["mean after"] == pytest.approx(0, abs=1e-5)
        assert stats.summary["variance after"] == pytest.approx(stats.before.var() / (stats.before.var() + 1e-5), rel=1e-4)


def test_top_neurons():
    idx, vals = top_neurons(np.array([0.1, 3.0, -0.2, 3.0, 1.0]), k=3)
    assert idx.tolist() == [1, 3, 4] and vals.tolist() == [3.0, 3.0, 1.0]


def test_logit_lens_last_row_is_the_models_output(traced):
    model, trace = traced
    ids, probs, names = logit_lens(model, trace)
    assert ids.shape == probs.shape == (model.cfg.n_layers + 1, trace.n_tokens) and names[0] == "embeddings"
    out = torch.softmax(torch.tensor(np.asarray(trace.arrays["hook_logits"])), -1)
    np.testing.assert_array_equal(ids[-1], out.argmax(-1).numpy())
    np.testing.assert_allclose(probs[-1], out.max(-1).values.numpy(), rtol=1e-5)
    # the first row decodes the embeddings: ln_final(E + P) @ W_U, computed here by hand
    x = torch.from_numpy(trace.arrays["hook_embed"] + trace.arrays["hook_pos_embed"])
    ln = model.ln_final
    xn = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5) * ln.w + ln.b
    first = torch.softmax(xn @ model.embed.W_E.T, -1)
    np.testing.assert_array_equal(ids[0], first.argmax(-1).numpy())


def test_stage_heatmap_writes_text_only_when_it_fits():
    values = np.random.default_rng(0).random((2, 50))
    text = np.full((2, 50), "x", dtype=object)
    assert stage_heatmap(values, ["a", "b"], [str(i) for i in range(50)], "t", "p", text).data[0].texttemplate is None
    small = stage_heatmap(values[:, :5], ["a", "b"], list("abcde"), "t", "p", text[:, :5])
    assert small.data[0].texttemplate == "%{text}" and "%{text}" in small.data[0].hovertemplate


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_each_norm_is_labelled_with_what_it_reads_and_where_its_output_goes(tokenizer, placement):
    model = small_model(norm_placement=placement)
    trace = run_trace(model, tokenizer, TEXT)
    a = trace.arrays
    ln1, ln2 = layernorm_stats(trace, 0, 2, placement)
    if placement == "pre":  # ln1 reads the stream before attention; attention reads its output
        assert (ln1.before_name, ln1.after_name, ln1.role) == ("resid_pre", "read by attention", "the norm before attention")
        np.testing.assert_array_equal(ln1.before, a["blocks.0.hook_resid_pre"][2])
        assert ln2.before_name == "resid_mid" and ln2.after_name == "read by the MLP"
    else:  # post-LN: ln1 normalises the sum after the attention add, and its output is resid_mid
        assert (ln1.before_name, ln1.after_name) == ("resid_pre + attn_out", "resid_mid")
        np.testing.assert_allclose(ln1.after, a["blocks.0.hook_resid_mid"][2], rtol=1e-6)
        np.testing.assert_allclose(ln2.after, a["blocks.0.hook_resid_post"][2], rtol=1e-6)
        assert ln2.before_name == "resid_mid + mlp_out" and ln2.role == "the norm after the feed-forward add"
