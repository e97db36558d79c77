"""Parity: checkpoints of other families, converted by `load_model`, compute what `transformers` computes.

Each test builds a small random `transformers` model (odd vocabulary sizes, head counts that are not powers
of two, multi-query and grouped-query attention), saves it as a Hugging Face folder, loads it through
`load_model`, and compares logits (max abs difference <= 1e-4) and every layer's attention weights
(<= 1e-5) with `transformers` run with `attn_implementation="eager"`, in float32.
"""

from __future__ import annotations

import pytest
import torch

from hf_models import bert_config, build, gpt2_config, llama_config, reference, save
from viz_model import load_model

LOGITS_ATOL, PATTERN_ATOL = 1e-4, 1e-5


def ids_for(vocab: int, n: int = 17, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


def assert_parity(ours, ref_out, ids, cache_kwargs=None, logits=True):
    out, cache = ours.run_with_cache(ids, **(cache_kwargs or {}))
    if logits:
        assert (out - ref_out.logits).abs().max().item() <= LOGITS_ATOL
    for i, ref_pattern in enumerate(ref_out.attentions):
        ours_pattern = cache[f"blocks.{i}.attn.hook_pattern"]
        assert ours_pattern.shape == ref_pattern.shape
        assert (ours_pattern - ref_pattern).abs().max().item() <= PATTERN_ATOL
    return out, cache


@pytest.mark.parametrize("kw", [dict(), dict(vocab_size=257, n_embd=40, n_head=5, n_layer=3, n_inner=72,
                                             tie_word_embeddings=False)])
def test_gpt2_parity(tmp_path, kw):
    ref = build("GPT2LMHeadModel", gpt2_config(**kw))
    model, tokenizer = load_model(save(ref, tmp_path / "gpt2"))
    assert tokenizer is None and model.cfg.family == "gpt2" and model.cfg.mlp == "gelu_tanh"
    ids = ids_for(model.cfg.d_vocab)
    _, cache = assert_parity(model, reference(ref, ids), ids)
    hidden = reference(ref, ids).hidden_states
    torch.testing.assert_close(cache["blocks.1.hook_resid_pre"], hidden[1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("masked_lm", [True, False])
def test_bert_parity(tmp_path, masked_lm):
    cfg = bert_config() if masked_lm else bert_config(hidden_size=30, num_attention_heads=5, vocab_size=91)
    ref = build("BertForMaskedLM" if masked_lm else "BertModel", cfg)
    model, _ = load_model(save(ref, tmp_path / "bert"))
    assert not model.cfg.causal and model.cfg.norm_placement == "post"
    ids = ids_for(model.cfg.d_vocab)
    types = torch.tensor([[0] * 9 + [1] * 8])
    ref_out = reference(ref, ids, token_type_ids=types)
    out, cache = assert_parity(model, ref_out, ids, dict(token_type_ids=types), logits=masked_lm)
    if not masked_lm:
        assert not model.has_lm_head
        assert (out - ref_out.last_hidden_state).abs().max().item() <= LOGITS_ATOL
    # bidirectional: the first token attends to later ones
    assert cache["blocks.0.attn.hook_pattern"][0, :, 0, 1:].sum() > 0.1


@pytest.mark.parametrize("family, kw", [
    ("Llama", dict()),  # grouped-query: 6 query heads share 2 key/value heads
    ("Llama", dict(num_attention_heads=3, num_key_value_heads=1, hidden_size=36, tie_word_embeddings=True)),  # MQA
    ("Llama", dict(num_attention_heads=5, num_key_value_heads=5, hidden_size=40, head_dim=12, vocab_size=131,
                   rope_parameters={"rope_type": "default", "rope_theta": 500.0})),
    ("Mistral", dict(sliding_window=5)),  # the window hides keys more than 4 positions back
    ("Qwen2", dict(num_attention_heads=6, num_key_value_heads=3)),  # q/k/v biases
])
def test_llama_family_parity(tmp_path, family, kw):
    ref = build(f"{family}ForCausalLM", llama_config(f"{family}Config", **kw))
    model, _ = load_model(save(ref, tmp_path / family))
    cfg = model.cfg
    assert cfg.positional == "rotary" and cfg.norm == "rmsnorm" and cfg.mlp == "swiglu"
    ids = ids_for(cfg.d_vocab, n=13)
    _, cache = assert_parity(model, reference(ref, ids), ids)
    assert cache["blocks.0.attn.hook_k"].shape[2] == cfg.n_kv_heads
    assert cache["blocks.0.attn.hook_pattern"].shape[1] == cfg.n_heads
    if family == "Mistral":
        assert cache["blocks.0.attn.hook_pattern"][0, :, 12, :8].abs().max() == 0


def test_llama_kv_cache_generation_matches_a_full_run(tmp_path):
    ref = build("LlamaForCausalLM", llama_config())
    model, _ = load_model(save(ref, tmp_path / "llama"))
    ids = ids_for(model.cfg.d_vocab, n=10)
    full = model(ids)
    kv = model.new_kv_cache()
    steps = [model(ids[:, :6], kv_cache=kv)] + [model(ids[:, i:i + 1], kv_cache=kv) for i in range(6, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_bert_masked_lm_with_untied_output_weights(tmp_path):
    ref = build("BertForMaskedLM", bert_config(tie_word_embeddings=False))
    model, _ = load_model(save(ref, tmp_path / "bert-untied"))
    assert not model.cfg.tied_embeddings
    ids = ids_for(model.cfg.d_vocab)
    assert_parity(model, reference(ref, ids), ids)


def test_unsupported_variants_are_refused_with_one_line(tmp_path):
    import json

    from viz_model import CheckpointError
    folder = save(build("LlamaForCausalLM", llama_config()), tmp_path / "llama")
    config = json.loads((folder / "config.json").read_text())
    for change, words in (({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantized"),
                          ({"rms_norm_eps": None}, "unexpected value"),
                          ({"rope_parameters": {"rope_type": "default", "rope_theta": "abc"}}, "unexpected value"),
                          ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}}, "rotary scaling")):
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(CheckpointError, match=words) as err:
            load_model(folder)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("kw", [dict(), dict(d_model=40, encoder_attention_heads=5, decoder_attention_heads=5,
                                             vocab_size=131, scale_embedding=True, encoder_layers=3)])
def test_bart_parity(tmp_path, kw):
    """Encoder, decoder (masked) and cross-attention patterns and the logits against transformers' BART."""
    from hf_models import bart_config
    ref = build("BartForConditionalGeneration", bart_config(**kw))
    with torch.no_grad():  # a buffer, so randomise() left it at zero: make a dropped b_U show
        ref.final_logits_bias.normal_(0, 1.0, generator=torch.Generator().manual_seed(9))
    model, _ = load_model(save(ref, tmp_path / "bart"))
    cfg = model.cfg
    assert cfg.is_encoder_decoder and cfg.n_encoder_layers == ref.config.encoder_layers
    src, tgt = ids_for(cfg.d_vocab, n=11), ids_for(cfg.d_vocab, n=7, seed=1)
    with torch.no_grad():
        out = ref(input_ids=src, decoder_input_ids=tgt, output_attentions=True)
    logits, cache = model.run_with_cache(tgt, src_tokens=src)
    assert (logits - out.logits).abs().max().item() <= LOGITS_ATOL
    kinds = (("encoder.blocks.{}.attn", out.encoder_attentions), ("blocks.{}.attn", out.decoder_attentions),
             ("blocks.{}.cross_attn", out.cross_attentions))
    for name, ref_patterns in kinds:
        for i, ref_pattern in enumerate(ref_patterns):
            ours = cache[name.format(i) + ".hook_pattern"]
            assert ours.shape == ref_pattern.shape
            assert (ours - ref_pattern).abs().max().item() <= PATTERN_ATOL, name.format(i)
    assert cache["blocks.0.cross_attn.hook_pattern"].shape[-1] == src.shape[1]  # key_pos over the source
    # greedy generation with our KV cache picks the tokens transformers' full forward passes pick
    from viz_model import generate
    steps = generate(model, [cfg.decoder_start_id], 6, temperature=0.0, src_ids=src[0].tolist())
    prefix = [cfg.decoder_start_id]
    with torch.no_grad():
        for step in steps:
            assert int(ref(input_ids=src, decoder_input_ids=torch.tensor([prefix])).logits[0, -1].argmax()) == step.token_id
            prefix.append(step.token_id)
