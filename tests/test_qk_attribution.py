"""QK attribution (issue 24, item 1): the (query source × key source) terms of a head's score sum to the score the
model computed (``hook_attn_scores`` before the mask; before the soft cap for Gemma 2), and one term per family equals
the same term computed by hand from `transformers`' own weights and hidden states (no code of ours in the
recomputation). Small random models, as the parity tests build them."""

from __future__ import annotations

import pytest
import torch

from hf_models import build, gpt2_config, llama_config, save, transformers
from test_families import ids_for
from viz_model import Config, VizTransformer, attribution, load_model
from viz_model.interventions.residual import residual_sources

N = 13  # tokens: short keeps every test fast


def check_sums(model, cache, capped: float | None = None) -> None:
    """Every visible cell of every layer and head (first and last query rows, every key they see): the terms sum to
    the model's score within 1e-4 × max(1, |score|)."""
    cfg = model.cfg
    n = cache["hook_embed"].shape[1]
    for layer in range(cfg.n_layers):
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][0]
        for head in range(cfg.n_heads):
            for q in (n // 2, n - 1):
                for k in range(q + 1 if cfg.causal else n):
                    score = float(scores[head, q, k])
                    if not torch.isfinite(scores[head, q, k]):
                        continue  # a sliding window hides it
                    total = sum(attribution.qk_attribution(model, cache, layer, head, q, k).values())
                    if capped is not None:  # the terms split the score before the cap
                        total = capped * torch.tanh(torch.tensor(total / capped)).item()
                    assert abs(total - score) <= 1e-4 * max(1.0, abs(score)), (layer, head, q, k, total, score)


def hf_and_ours(tmp_path, cls: str, config, **run):
    ref = build(cls, config)
    model, _ = load_model(save(ref, tmp_path / cls))
    ids = ids_for(model.cfg.d_vocab, n=N)
    _, cache = model.run_with_cache(ids, **run)
    return ref, model, ids, cache


def rms_scale(x: torch.Tensor, eps: float, centre: bool) -> torch.Tensor:
    x = x - x.mean() if centre else x
    return (x.pow(2).mean() + eps).sqrt()


def test_gpt2_terms_sum_and_the_embed_term_equals_transformers(tmp_path):
    ref, model, ids, cache = hf_and_ours(tmp_path, "GPT2LMHeadModel", gpt2_config(n_layer=3))
    check_sums(model, cache)
    # layer 1, head 2, query 9, key 4: the token embedding at both ends, by hand from GPT-2's wte, ln_1 and c_attn
    layer, head, q, k = 1, 2, 9, 4
    with torch.no_grad():
        hidden = ref(ids, output_hidden_states=True).hidden_states[layer][0]  # the stream entering block 1
        block, d, dh = ref.transformer.h[layer], 36, 12
        ln, W = block.ln_1, block.attn.c_attn.weight  # Conv1D: x @ W, columns [q | k | v], head-major in each

        def side(pos: int, cols: slice) -> torch.Tensor:
            e = ref.transformer.wte.weight[ids[0, pos]]
            normed = (e - e.mean()) / rms_scale(hidden[pos], ln.eps, True) * ln.weight
            return normed @ W[:, cols]
        q_cols, k_cols = slice(head * dh, (head + 1) * dh), slice(d + head * dh, d + (head + 1) * dh)
        term = side(q, q_cols) @ side(k, k_cols) / dh ** 0.5
    ours = attribution.qk_attribution(model, cache, layer, head, q, k)
    assert abs(ours[("embed", "embed")] - term.item()) <= 1e-5
    assert {"pos_embed", "L0H0", "L0H2", "L0.attn_bias", "L0.mlp", "bias"} <= {a for a, _ in ours}
    assert len(ours) == 8 ** 2  # embed, pos_embed, 3 heads, b_O, mlp, bias on each side


def hand_rotary_term(ref_model, block_attn, norm_weight, eps, hidden, e_q, e_k, q, k, head, kv_head, dh, scaling,
                     apply_rotary_pos_emb, q_rows=None, k_rows=None, plus_one=False, centre=False, norm_bias=None):
    """One (embed, embed) term by hand from a transformers rotary model: norm with the scale of ``hidden`` at each
    position, its q/k projection rows, the family's own rotary embedding and ``apply_rotary_pos_emb``."""
    w = (1.0 + norm_weight) if plus_one else norm_weight
    cos, sin = ref_model.rotary_emb(hidden[None], torch.arange(hidden.shape[0])[None])

    def side(e, pos, W, rows):
        x = (e - e.mean()) if centre else e
        v = x / rms_scale(hidden[pos], eps, centre) * w
        v = (v @ W[rows].T)[None, None, None]  # [1, 1 head, 1 pos, dh]
        return apply_rotary_pos_emb(v, v, cos[:, pos:pos + 1], sin[:, pos:pos + 1])[0][0, 0, 0]
    q_rows = q_rows if q_rows is not None else slice(head * dh, (head + 1) * dh)
    k_rows = k_rows if k_rows is not None else slice(kv_head * dh, (kv_head + 1) * dh)
    Wq = block_attn["q"]
    Wk = block_attn["k"]
    return (side(e_q, q, Wq, q_rows) @ side(e_k, k, Wk, k_rows) * scaling).item()


def test_llama_gqa_rotary_terms_sum_and_the_embed_term_equals_transformers(tmp_path):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    ref, model, ids, cache = hf_and_ours(tmp_path, "LlamaForCausalLM", llama_config())
    assert model.cfg.n_kv_heads == 2 and model.cfg.n_heads == 6
    check_sums(model, cache)
    layer, head, q, k = 1, 5, 11, 3  # head 5 reads key/value head 2
    with torch.no_grad():
        hidden = ref(ids, output_hidden_states=True).hidden_states[layer][0]
        block = ref.model.layers[layer]
        e = ref.model.embed_tokens.weight
        term = hand_rotary_term(ref.model, {"q": block.self_attn.q_proj.weight, "k": block.self_attn.k_proj.weight},
                                block.input_layernorm.weight, block.input_layernorm.variance_epsilon, hidden,
                                e[ids[0, q]], e[ids[0, k]], q, k, head, head // 3, 8, block.self_attn.scaling,
                                apply_rotary_pos_emb)
    ours = attribution.qk_attribution(model, cache, layer, head, q, k)
    assert abs(ours[("embed", "embed")] - term) <= 1e-5
    assert "pos_embed" not in {a for a, _ in ours}  # rotary: positions enter inside attention, not as a source


def test_gpt_neox_partial_rotary_parallel_terms_sum_and_the_embed_term_equals_transformers(tmp_path):
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb
    config = transformers.GPTNeoXConfig(vocab_size=103, hidden_size=36, num_hidden_layers=3, num_attention_heads=3,
                                        intermediate_size=58, max_position_embeddings=64, rotary_pct=0.5)
    ref, model, ids, cache = hf_and_ours(tmp_path, "GPTNeoXForCausalLM", config)
    assert model.cfg.rotary_dim == 6 and model.cfg.parallel_residual
    check_sums(model, cache)
    layer, head, q, k = 2, 1, 12, 7
    with torch.no_grad():
        hidden = ref(ids, output_hidden_states=True).hidden_states[layer][0]
        block = ref.gpt_neox.layers[layer]
        W = block.attention.query_key_value.weight  # rows: per head [q | k | v], d_head each
        dh = 12
        e = ref.gpt_neox.embed_in.weight
        term = hand_rotary_term(ref.gpt_neox, {"q": W, "k": W}, block.input_layernorm.weight, block.input_layernorm.eps,
                                hidden, e[ids[0, q]], e[ids[0, k]], q, k, head, head, dh, dh ** -0.5,
                                apply_rotary_pos_emb, q_rows=slice(3 * dh * head, 3 * dh * head + dh),
                                k_rows=slice(3 * dh * head + dh, 3 * dh * head + 2 * dh), centre=True)
    assert abs(attribution.qk_attribution(model, cache, layer, head, q, k)[("embed", "embed")] - term) <= 1e-5


def test_gemma2_terms_split_the_score_before_the_soft_cap(tmp_path):
    from transformers.models.gemma2.modeling_gemma2 import apply_rotary_pos_emb
    config = transformers.Gemma2Config(vocab_size=97, hidden_size=42, intermediate_size=62, num_hidden_layers=3,
                                       num_attention_heads=3, num_key_value_heads=1, head_dim=14,
                                       max_position_embeddings=64, sliding_window=4, query_pre_attn_scalar=20,
                                       attn_logit_softcapping=1.5, final_logit_softcapping=2.0)
    ref, model, ids, cache = hf_and_ours(tmp_path, "Gemma2ForCausalLM", config)
    assert model.cfg.norm_placement == "sandwich"
    check_sums(model, cache, capped=1.5)
    assert "soft-caps" in attribution.qk_note(model) and attribution.qk_note(load_model(None)[0]) is None
    layer, head, q, k = 1, 2, 12, 10
    with torch.no_grad():
        hidden = ref(ids, output_hidden_states=True).hidden_states[layer][0]
        block = ref.model.layers[layer]
        e = ref.model.embed_tokens(ids)[0]  # Gemma's embedding, times sqrt(hidden_size)
        term = hand_rotary_term(ref.model, {"q": block.self_attn.q_proj.weight, "k": block.self_attn.k_proj.weight},
                                block.input_layernorm.weight, block.input_layernorm.eps, hidden, e[q], e[k], q, k,
                                head, 0, 14, 20 ** -0.5, apply_rotary_pos_emb, plus_one=True)
    assert abs(attribution.qk_attribution(model, cache, layer, head, q, k)[("embed", "embed")] - term) <= 1e-5


@pytest.mark.parametrize("cls,config", [
    ("Qwen3ForCausalLM", lambda: transformers.Qwen3Config(**{**dict(vocab_size=97, hidden_size=50, intermediate_size=76,
                                                             num_hidden_layers=2, max_position_embeddings=64),
                                                          "num_attention_heads": 5, "num_key_value_heads": 5,
                                                          "head_dim": 10})),
    ("Olmo2ForCausalLM", lambda: transformers.Olmo2Config(vocab_size=97, hidden_size=60, intermediate_size=76,
                                                         num_hidden_layers=2, num_attention_heads=6,
                                                         num_key_value_heads=3, max_position_embeddings=64)),
])
def test_qk_norm_and_output_norm_families_sum(tmp_path, cls, config):
    _, model, _, cache = hf_and_ours(tmp_path, cls, config())
    assert model.cfg.qk_norm != "none"
    check_sums(model, cache)


def test_t5_decoder_terms_and_relative_position_bias(tmp_path):
    config = transformers.T5Config(vocab_size=99, d_model=36, d_kv=10, d_ff=50, num_layers=2, num_decoder_layers=2,
                                   num_heads=3, relative_attention_num_buckets=12, relative_attention_max_distance=20)
    ref = build("T5ForConditionalGeneration", config)
    model, _ = load_model(save(ref, tmp_path / "t5"))
    src, tgt = ids_for(99, n=9), ids_for(99, n=N, seed=1)
    _, cache = model.run_with_cache(tgt, src_tokens=src)
    check_sums(model, cache)
    layer, head, q, k = 1, 0, 12, 2
    ours = attribution.qk_attribution(model, cache, layer, head, q, k)
    assert "L0X2" in {a for a, _ in ours}  # the decoder's stream holds layer 0's cross-attention heads
    with torch.no_grad():
        out = ref(input_ids=src, decoder_input_ids=tgt, output_hidden_states=True)
        attn0 = ref.decoder.block[0].layer[0].SelfAttention
        bias = attn0.compute_bias(N, N)[0, head, q, k].item()
        hidden = out.decoder_hidden_states[layer][0]
        block = ref.decoder.block[layer].layer[0]
        norm, attn, e = block.layer_norm, block.SelfAttention, ref.shared.weight
        rows = slice(head * 10, (head + 1) * 10)

        def side(pos, W):
            return (e[tgt[0, pos]] / rms_scale(hidden[pos], norm.variance_epsilon, False) * norm.weight) @ W[rows].T
        term = (side(q, attn.q.weight) @ side(k, attn.k.weight)).item()  # T5 does not divide by sqrt(d_head)
    assert abs(ours[("rel_pos", "rel_pos")] - bias) <= 1e-6
    assert abs(ours[("embed", "embed")] - term) <= 1e-5


def test_pattern_weighted_summary_sums_to_the_mean_score_the_query_sees(monkeypatch):
    model, tokenizer = load_model(None)
    ids = torch.tensor([tokenizer.encode("Once upon a time there was a little dog. The dog").ids])
    _, cache = model.run_with_cache(ids)
    layer, head, q = 3, 5, ids.shape[1] - 1
    summary = attribution.qk_pattern_attribution(model, cache, layer, head, q)
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, q]
    scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][0, head, q]
    expected = float((pattern[: q + 1] * scores[: q + 1]).sum())
    assert abs(sum(summary.values()) - expected) <= 1e-4 * max(1.0, abs(expected))
    assert set(summary) == set(attribution.qk_attribution(model, cache, layer, head, q, 0))
    from viz_model.interventions import qk
    monkeypatch.setattr(qk, "KEY_BLOCK_BYTES", 1)  # one key per block: the same sums
    one_by_one = attribution.qk_pattern_attribution(model, cache, layer, head, q)
    assert max(abs(one_by_one[k] - summary[k]) for k in summary) <= 1e-5
    # the shared decomposition: the sources entering block `layer` sum to its resid_pre
    names, vectors = residual_sources(model, cache, [2, q], layer)
    torch.testing.assert_close(vectors.sum(0), cache[f"blocks.{layer}.hook_resid_pre"][0, [2, q]], atol=1e-4, rtol=0)


def test_refusals_are_one_line():
    tiny = dict(n_layers=2, d_model=16, n_heads=2, d_head=8, d_mlp=32, d_vocab=11, n_ctx=8)
    post = VizTransformer(Config(**tiny, norm_placement="post"))
    clipped = VizTransformer(Config(**tiny, clip_qkv=1.0, positional="rotary", norm="rmsnorm"))
    ids = torch.tensor([[1, 2, 3, 4]])
    for model, words in ((post, "post-LN"), (clipped, "clip_qkv")):
        _, cache = model.run_with_cache(ids)
        with pytest.raises(ValueError, match=words) as err:
            attribution.qk_attribution(model, cache, 1, 0, 3, 1)
        assert "\n" not in str(err.value)
    pre = VizTransformer(Config(**tiny))
    _, cache = pre.run_with_cache(ids)
    for args, words in (((2, 0, 3, 1), "layer 2"), ((1, 2, 3, 1), "head 2"), ((1, 0, 3, 4), "position 4")):
        with pytest.raises(ValueError, match=words):
            attribution.qk_attribution(pre, cache, *args)


def test_bert_post_ln_is_refused(tmp_path):
    from hf_models import bert_config
    model, _ = load_model(save(build("BertForMaskedLM", bert_config()), tmp_path / "bert"))
    _, cache = model.run_with_cache(ids_for(model.cfg.d_vocab, n=5))
    with pytest.raises(ValueError, match="post-LN"):
        attribution.qk_attribution(model, cache, 1, 0, 3, 1)
