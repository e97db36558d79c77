"""Parity of the further dense families (issue 16): each small random `transformers` model, saved as a Hugging Face
folder and read back through `load_model`, computes the logits (<= 1e-4) and every attention pattern (<= 1e-5) that
`transformers` computes with eager attention in float32. Shapes are chosen to be awkward: odd vocabularies, head
counts that are not powers of two, grouped-query attention where the family has it, d_head not a power of two."""

from __future__ import annotations

import pytest
import torch

from hf_models import build, reference, save, transformers
from test_families import assert_parity, ids_for
from viz_model import load_model

LLAMA = dict(vocab_size=97, hidden_size=50, intermediate_size=76, num_hidden_layers=2, num_attention_heads=5,
             num_key_value_heads=1, head_dim=10, max_position_embeddings=256)


def parity(tmp_path, cls: str, config, n: int = 21, **ids_kw):
    """Build, save, load through `load_model`, compare; returns (our model, its cache, the reference output)."""
    ref = build(cls, config)
    model, _ = load_model(save(ref, tmp_path / cls))
    ids = ids_for(model.cfg.d_vocab, n=n, **ids_kw)
    ref_out = reference(ref, ids)
    _, cache = assert_parity(model, ref_out, ids)
    return model, cache, ref_out


@pytest.mark.parametrize("rope", [
    {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},  # wavelengths 6, 40, 250, ...: one kept, one smoothed, three divided
    {"rope_type": "linear", "rope_theta": 500.0, "factor": 3.0},
])
def test_llama_rope_scaling(tmp_path, rope):
    model, _, _ = parity(tmp_path, "LlamaForCausalLM", transformers.LlamaConfig(**LLAMA, rope_parameters=rope))
    assert model.cfg.rotary_scaling == rope["rope_type"] and model.cfg.rotary_factor == rope["factor"]


def test_qwen3_qk_norm(tmp_path):
    cfg = transformers.Qwen3Config(**{**LLAMA, "num_key_value_heads": 5, "num_attention_heads": 5})
    model, cache, _ = parity(tmp_path, "Qwen3ForCausalLM", cfg)
    assert model.cfg.qk_norm == "head"
    q = cache["blocks.0.attn.q_norm.hook_normalized"] / model.blocks[0].attn.q_norm.w
    torch.testing.assert_close(q.pow(2).mean(-1), torch.ones(q.shape[:-1]), atol=1e-4, rtol=0)  # unit RMS per head


def test_olmo2_output_norms_and_qk_norm_over_all_heads(tmp_path):
    kw = {k: v for k, v in LLAMA.items() if k != "head_dim"}
    cfg = transformers.Olmo2Config(**{**kw, "num_key_value_heads": 3, "num_attention_heads": 6, "hidden_size": 60})
    model, _, _ = parity(tmp_path, "Olmo2ForCausalLM", cfg)
    assert model.cfg.qk_norm == "all" and model.cfg.norm_placement == "output"
    assert model.blocks[0].ln1 is None and model.blocks[0].attn.q_norm.w.shape == (60,)


@pytest.mark.parametrize("kw", [dict(rotary_pct=0.5), dict(hidden_size=72, rotary_pct=0.25, use_parallel_residual=False,
                                                        tie_word_embeddings=True)])
def test_gpt_neox_partial_rotary_and_parallel_residual(tmp_path, kw):
    base = dict(vocab_size=103, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=58,
                max_position_embeddings=64)
    model, cache, _ = parity(tmp_path, "GPTNeoXForCausalLM", transformers.GPTNeoXConfig(**{**base, **kw}))
    cfg = model.cfg
    assert cfg.rotary_dim == int(cfg.d_head * kw["rotary_pct"]) and cfg.parallel_residual == kw.get("use_parallel_residual", True)
    # partial rotary: the dimensions past rotary_dim are not turned
    torch.testing.assert_close(cache["blocks.0.attn.hook_rot_q"][..., cfg.rotary_dim:],
                               cache["blocks.0.attn.hook_q"][..., cfg.rotary_dim:], atol=0, rtol=0)
    assert (cache["blocks.0.attn.hook_rot_q"][0, 3:, :, :cfg.rotary_dim] - cache["blocks.0.attn.hook_q"][0, 3:, :, :cfg.rotary_dim]).abs().max() > 1e-3


@pytest.mark.parametrize("kw", [dict(), dict(word_embed_proj_dim=22, do_layer_norm_before=False, enable_bias=False)])
def test_opt_offset_positions_and_projections(tmp_path, kw):
    base = dict(vocab_size=89, hidden_size=30, num_hidden_layers=2, ffn_dim=46, num_attention_heads=5,
                max_position_embeddings=40, word_embed_proj_dim=30)
    model, _, _ = parity(tmp_path, "OPTForCausalLM", transformers.OPTConfig(**{**base, **kw}))
    assert model.cfg.norm_placement == ("post" if kw else "pre") and model.cfg.n_ctx == 40


@pytest.mark.parametrize("cls", ["DistilBertForMaskedLM", "DistilBertModel"])
def test_distilbert_encoder(tmp_path, cls):
    cfg = transformers.DistilBertConfig(vocab_size=91, dim=30, n_layers=2, n_heads=5, hidden_dim=44,
                                        max_position_embeddings=40)
    ref = build(cls, cfg)
    model, _ = load_model(save(ref, tmp_path / cls))
    ids = ids_for(91)
    ref_out = reference(ref, ids)
    out, cache = assert_parity(model, ref_out, ids, logits=cls.endswith("MaskedLM"))
    assert not model.cfg.causal and model.cfg.family == "distilbert" and model.has_lm_head == cls.endswith("MaskedLM")
    if not model.has_lm_head:
        assert (out - ref_out.last_hidden_state).abs().max().item() <= 1e-4
    assert cache["blocks.0.attn.hook_pattern"][0, :, 0, 1:].sum() > 0.1  # bidirectional


def test_roberta_masked_lm_positions_after_the_padding_id(tmp_path):
    cfg = transformers.RobertaConfig(vocab_size=95, hidden_size=42, num_hidden_layers=2, num_attention_heads=3,
                                     intermediate_size=50, max_position_embeddings=44, type_vocab_size=1, pad_token_id=1)
    ref = build("RobertaForMaskedLM", cfg)
    model, _ = load_model(save(ref, tmp_path / "roberta"))
    assert model.cfg.n_ctx == 42 and model.cfg.family == "roberta" and model.cfg.lm_head == "mlm"
    ids = ids_for(95, n=40)
    ids[ids == 1] = 7
    ids[0, [6, 7, 21]] = 1  # padding inside the text: its own row, and the tokens after it do not move on
    table = ref.roberta.embeddings.position_embeddings.weight
    torch.testing.assert_close(model.pos_embed.W_pos[0], table[2])
    _, cache = assert_parity(model, reference(ref, ids), ids)
    pos = cache["hook_pos_embed"][0]
    torch.testing.assert_close(pos[[6, 7, 21]], table[[1, 1, 1]])  # row pad_token_id
    torch.testing.assert_close(pos[[5, 8, 22]], table[[7, 8, 21]])  # pad + 1 + (tokens that are not padding before)


GEMMA = dict(vocab_size=97, hidden_size=42, intermediate_size=62, num_hidden_layers=3, num_attention_heads=3,
             num_key_value_heads=1, head_dim=14, max_position_embeddings=64)


def test_gemma_scaled_embeddings_plus_one_norms_and_geglu(tmp_path):
    model, _, ref_out = parity(tmp_path, "GemmaForCausalLM", transformers.GemmaConfig(**GEMMA))
    cfg = model.cfg
    assert cfg.mlp == "geglu" and abs(cfg.embed_scale - 42 ** 0.5) < 1e-9


@pytest.mark.parametrize("cls, kw", [
    ("Gemma2Config Gemma2ForCausalLM", dict(sliding_window=4, query_pre_attn_scalar=20, attn_logit_softcapping=1.5, final_logit_softcapping=2.0)),
    ("Gemma3TextConfig Gemma3ForCausalLM", dict(sliding_window=5, query_pre_attn_scalar=30, layer_types=["sliding_attention", "full_attention",
                                                                                 "sliding_attention"],
                        rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.0},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}})),
])
def test_gemma2_and_3_softcaps_windows_and_sandwich_norms(tmp_path, cls, kw):
    config_cls, cls = cls.split()
    model, cache, _ = parity(tmp_path, cls, getattr(transformers, config_cls)(**GEMMA, **kw))
    cfg = model.cfg
    assert cfg.norm_placement == "sandwich" and cfg.window_layers == [0, 2] and cfg.attn_scale == kw["query_pre_attn_scalar"] ** 0.5
    pattern = [cache[f"blocks.{i}.attn.hook_pattern"][0, :, -1] for i in range(3)]
    window = kw["sliding_window"]
    assert pattern[0][:, :-window].abs().max() == 0 and pattern[1][:, :-window].abs().max() > 0  # only layer 0, 2 window
    if cls == "Gemma2ForCausalLM":  # every score within (-cap, cap), and the cap bites (small cap, wide scores)
        scores = cache["blocks.0.attn.hook_attn_scores"]
        finite = scores[scores.isfinite()]
        assert finite.abs().max() < 1.5 and finite.abs().max() > 1.0
        assert cache["hook_logits"].abs().max() < 2.0
    else:
        assert cfg.qk_norm == "head" and model.blocks[0].attn.cfg.rotary_base == 50.0
        assert model.blocks[1].attn.cfg.rotary_scaling == "linear" and model.blocks[0].attn.cfg.rotary_scaling == "none"


PHI3 = dict(vocab_size=101, hidden_size=50, intermediate_size=66, num_hidden_layers=2, num_attention_heads=5,
            num_key_value_heads=1, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)


@pytest.mark.parametrize("kw", [dict(), dict(sliding_window=6, partial_rotary_factor=0.4, num_key_value_heads=5)])
def test_phi3_fused_projections(tmp_path, kw):
    model, cache, _ = parity(tmp_path, "Phi3ForCausalLM", transformers.Phi3Config(**{**PHI3, **kw}))
    if kw:
        assert model.cfg.rotary_dim == 4 and model.cfg.attn_window == 6
        assert cache["blocks.1.attn.hook_pattern"][0, :, -1, :-6].abs().max() == 0


# LongRoPE on 8 of 10 dimensions (4 pairs, each with factors of its own), short factors up to 8 tokens
LONGROPE = {"rope_type": "longrope", "rope_theta": 100.0, "short_factor": [1.0, 1.5, 2.5, 4.0],
            "long_factor": [1.3, 3.0, 7.0, 11.0]}


@pytest.fixture(scope="module")
def longrope(tmp_path_factory):
    """(transformers' Phi-3 with LongRoPE, ours loaded from its folder): original context 8 of 64, so the default
    attention factor is sqrt(1 + ln 8 / ln 8) = sqrt(2)."""
    config = transformers.Phi3Config(**PHI3, partial_rotary_factor=0.8, original_max_position_embeddings=8,
                                     rope_parameters=dict(LONGROPE))
    ref = build("Phi3ForCausalLM", config)
    return ref, load_model(save(ref, tmp_path_factory.mktemp("longrope") / "phi3"))[0]


def test_phi3_longrope_short_factors_up_to_the_original_context_long_ones_beyond(longrope):
    """A text of 8 tokens runs on the short factors, one of 12 on the long ones, in both models (transformers keeps
    the frequencies it chose in ``rotary_emb.inv_freq``), with the same logits and patterns."""
    from viz_model.rotary import long_factors, scaled_freqs
    ref, model = longrope
    cfg = model.cfg
    assert (cfg.rotary_scaling, cfg.rotary_original_ctx, cfg.d_rotary) == ("longrope", 8, 8)
    assert cfg.rotary_attn_factor == ref.model.rotary_emb.attention_scaling == pytest.approx(2 ** 0.5)
    rotated = {}
    for n in (8, 12):
        ids = ids_for(cfg.d_vocab, n=n)
        _, cache = assert_parity(model, reference(ref, ids), ids)
        assert long_factors(cfg, n) == (n > 8)
        assert torch.equal(scaled_freqs(cfg, n), ref.model.rotary_emb.inv_freq)
        rotated[n] = cache["blocks.0.attn.hook_rot_k"][0, :8]
    assert (rotated[8] - rotated[12]).abs().max() > 0.1  # the same 8 tokens, turned by other angles


def test_phi3_longrope_generation_recomputes_once_it_crosses_into_the_long_factors(longrope):
    """Greedy generation from 6 tokens to 11 with our KV cache gives transformers' tokens and probabilities:
    at 9 tokens both drop the cache, whose keys were turned with the short factors, and run all 9 again."""
    from viz_model import generate
    ref, model = longrope
    ids = ids_for(model.cfg.d_vocab, n=6)
    steps = generate(model, ids[0].tolist(), 5, temperature=0.0)
    with torch.no_grad():
        out = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False,
                           eos_token_id=None, output_logits=True, return_dict_in_generate=True)
    assert [s.token_id for s in steps] == out.sequences[0, 6:].tolist()
    for step, logits in zip(steps, out.logits):
        assert abs(step.model_prob - torch.softmax(logits[0], -1)[step.token_id].item()) <= 1e-5
    seq = out.sequences[0].tolist()
    kv = model.new_kv_cache()
    with torch.no_grad():  # without the recompute: 8 short-turned keys in the cache, the 9th position turned long
        model(torch.tensor([seq[:8]]), kv_cache=kv)
        stale = model(torch.tensor([seq[8:9]]), kv_cache=kv)[0, -1]
    assert (stale - out.logits[3][0]).abs().max() > 1e-3


def test_hostile_longrope_and_window_settings_are_refused_with_one_line(longrope, tmp_path):
    import json

    from viz_model import CheckpointError, Config, ConfigError
    ref, model = longrope
    folder = save(ref, tmp_path / "phi3")
    config = json.loads((folder / "config.json").read_text())
    rope = config["rope_parameters"]
    for change, words in (({"short_factor": [1.0] * 5}, "rotary_short_factor must be a list of 4"),
                          ({"long_factor": [1.0, 2.0, float("nan"), 3.0]}, "rotary_long_factor"),
                          ({"long_factor": [1.0, 2.0, -3.0, 3.0]}, "rotary_long_factor"),
                          ({"long_factor": [1.0, 2.0, 10**400, 3.0]}, "rotary_long_factor"),
                          ({"short_factor": [1.0, "2", 3.0, 4.0]}, "rotary_short_factor"),
                          ({"short_factor": [[1.0], 2.0, 3.0, 4.0]}, "rotary_short_factor"),
                          ({"short_factor": [1.0] * 10**5}, "rotary_short_factor"),
                          ({"long_factor": None}, "needs long_factor"),
                          ({"attention_factor": 0.0}, "rotary_attn_factor"),
                          ({"rope_type": "dynamic"}, "dynamic")):
        (folder / "config.json").write_text(json.dumps({**config, "rope_parameters": {**rope, **change}}))
        with pytest.raises(CheckpointError, match=words) as err:
            load_model(folder)
        assert "\n" not in str(err.value)
    su = {k: v for k, v in rope.items() if k not in ("rope_type", "original_max_position_embeddings")}
    (folder / "config.json").write_text(json.dumps({**config, "rope_parameters": None, "rope_scaling": {**su, "type": "su"}}))
    assert load_model(folder)[0].cfg == model.cfg  # the older spelling, with the top-level context (8)
    for change, words in (({"original_max_position_embeddings": 1}, "ln 1"),
                          ({"original_max_position_embeddings": "8"}, "original_max_position_embeddings"),
                          ({"model_type": "llama"}, "Phi-3 only")):
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(CheckpointError, match=words):
            load_model(folder)
    folder = save(build("Qwen2ForCausalLM", transformers.Qwen2Config(**LLAMA)), tmp_path / "qwen2")
    config = json.loads((folder / "config.json").read_text())
    for change, words in (({"layer_types": ["sliding_attention"] * 3}, "layer_types must list 2"),
                          ({"layer_types": ["sliding_attention"] * 2}, "no sliding window"),
                          ({"use_sliding_window": True, "sliding_window": 0, "layer_types": None, "max_window_layers": 1},
                           "attn_window")):
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(CheckpointError, match=words):
            load_model(folder)
    text = json.loads(model.cfg.to_json())  # our own checkpoints' config: the lists are checked there too
    assert Config.from_json(json.dumps(text)).rotary_long_factor == LONGROPE["long_factor"]
    with pytest.raises(ConfigError, match="rotary_short_factor must be null without longrope"):
        Config.from_json(json.dumps({**text, "rotary_scaling": "none"}))


@pytest.mark.parametrize("family", ["Qwen2", "Qwen3", "Qwen2Moe"])
def test_qwen_sliding_window_in_some_layers(tmp_path, family):
    """use_sliding_window windows layers from max_window_layers on (Qwen2, Qwen3), or the even layers below it
    (Qwen2-MoE): a window of 3 over a 10-token text, in exactly those layers."""
    kw = dict(LLAMA, num_hidden_layers=4, use_sliding_window=True, sliding_window=3, max_window_layers=2)
    if family == "Qwen2Moe":
        kw.update(max_window_layers=3, num_experts=3, num_experts_per_tok=2, moe_intermediate_size=20,
                  shared_expert_intermediate_size=14)
    config = getattr(transformers, f"{family}Config")(**kw)
    config._experts_implementation = "eager"
    model, cache, _ = parity(tmp_path, f"{family}ForCausalLM", config, n=10)
    windowed = [0, 2] if family == "Qwen2Moe" else [2, 3]
    assert model.cfg.window_layers == windowed and model.cfg.attn_window == 3
    for i in range(4):
        hidden = cache[f"blocks.{i}.attn.hook_pattern"][0, :, -1, :-3].abs().max()
        assert (hidden == 0) == (i in windowed), i


@pytest.mark.parametrize("overrides", [
    dict(norm="rmsnorm", mlp="geglu", qk_norm="head", norm_placement="sandwich", attn_window=3, window_layers=[0]),
    dict(qk_norm="all", norm_placement="output", n_kv_heads=2, n_encoder_layers=2),
    dict(positional="rotary", rotary_dim=4, parallel_residual=True)])
def test_count_params_is_exact_with_the_new_switches(overrides):
    from conftest import small_config
    from viz_model import VizTransformer
    from viz_model.limits import count_params
    cfg = small_config(**overrides)
    with torch.device("meta"):
        model = VizTransformer(cfg)
    assert count_params(cfg) == model.n_params()


def test_unsupported_settings_of_the_new_families_are_refused_with_one_line(tmp_path):
    import json

    from viz_model import CheckpointError
    folder = save(build("Gemma2ForCausalLM", transformers.Gemma2Config(**GEMMA, sliding_window=4)), tmp_path / "g2")
    config = json.loads((folder / "config.json").read_text())
    for change, words in (({"layer_types": ["sliding_attention"]}, "layer_types"),
                          ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "yarn"),
                          ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}}, "factor"),
                          ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                "partial_rotary_factor": 2.0}}, "partial_rotary_factor"),
                          ({"attn_logit_softcapping": "50"}, "attn_logit_softcapping"),
                          ({"hidden_activation": "silu"}, "hidden_activation")):
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(CheckpointError, match=words) as err:
            load_model(folder)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("kw", [dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),  # v1.1
                                dict(num_decoder_layers=2, d_kv=12)])  # original T5: ReLU, scaled tied head
def test_t5_relative_position_buckets(tmp_path, kw):
    """Encoder, decoder (masked) and cross-attention patterns and the logits against transformers' T5, on texts
    longer than the exact buckets so that the log-spaced ones are used."""
    base = dict(vocab_size=99, d_model=36, d_kv=10, d_ff=50, num_layers=2, num_decoder_layers=3, num_heads=3,
                relative_attention_num_buckets=12, relative_attention_max_distance=20)
    ref = build("T5ForConditionalGeneration", transformers.T5Config(**{**base, **kw}))
    model, _ = load_model(save(ref, tmp_path / "t5"))
    cfg = model.cfg
    assert cfg.rel_pos_buckets == 12 and cfg.attn_scale == 1.0 and cfg.positional == "none"
    src, tgt = ids_for(99, n=27), ids_for(99, n=23, seed=1)
    with torch.no_grad():
        out = ref(input_ids=src, decoder_input_ids=tgt, output_attentions=True)
    logits, cache = model.run_with_cache(tgt, src_tokens=src)
    assert (logits - out.logits).abs().max().item() <= 1e-4
    kinds = (("encoder.blocks.{}.attn", out.encoder_attentions), ("blocks.{}.attn", out.decoder_attentions),
             ("blocks.{}.cross_attn", out.cross_attentions))
    for name, ref_patterns in kinds:
        for i, ref_pattern in enumerate(ref_patterns):
            assert (cache[name.format(i) + ".hook_pattern"] - ref_pattern).abs().max().item() <= 1e-5, name.format(i)
    bias = cache["encoder.rel_pos.hook_bias"][0]  # [head, query, key]: a function of key - query only
    assert bias.shape == (3, 27, 27) and torch.equal(bias[:, 5, 3], bias[:, 9, 7]) and not torch.equal(bias[:, 5, 3], bias[:, 3, 5])
    # greedy generation with our KV cache picks the tokens transformers' full forward passes pick
    from viz_model import generate
    steps = generate(model, [cfg.decoder_start_id], 4, temperature=0.0, src_ids=src[0].tolist())
    prefix = [cfg.decoder_start_id]
    with torch.no_grad():
        for step in steps:
            assert int(ref(input_ids=src, decoder_input_ids=torch.tensor([prefix])).logits[0, -1].argmax()) == step.token_id
            prefix.append(step.token_id)


def test_the_new_switches_train(tmp_path):
    """Soft caps, q/k norm, sandwich norms, GeGLU and T5's bias under autograd: a backward pass reaches every switch's
    weights (in-place operations that autograd cannot differentiate would raise here)."""
    from conftest import small_config
    from viz_model import VizTransformer
    cfg = small_config(positional="rotary", norm="rmsnorm", mlp="geglu", norm_placement="sandwich", attn_softcap=5.0,
                       logit_softcap=3.0, attn_scale=2.0, qk_norm="head", rel_pos_buckets=8, rel_pos_max_distance=20)
    model = VizTransformer(cfg).train()
    ids = torch.randint(0, cfg.d_vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()
    for p in (model.rel_pos.W_rel, model.blocks[0].attn.q_norm.w, model.blocks[0].ln1_post.w, model.blocks[0].mlp.W_gate):
        assert p.grad is not None and p.grad.abs().sum() > 0
