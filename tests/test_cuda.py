"""The GPU path (issue 23): run only where torch sees a CUDA GPU (this project's CI has none; docs/memory.md says where
these last ran). On the GPU:

- every family's conversion, run on CUDA, computes what ``transformers`` (eager attention, float32) computes on the
  same GPU: logits <= 1e-4, every attention pattern <= 1e-5, the tolerances of the CPU parity tests;
- the interventions on a model loaded on the GPU (head ablation, per-head effects, exact patching with prefix reuse,
  the four attribution sweeps, direct logit attribution, generation with a KV cache, the app's trace) give the
  numbers of the same model on the CPU;
- dictionaries (SAEs, transcoders; kept on the CPU) read, steer and ablate a model on the GPU: the same numbers as
  on the CPU;
- a model placed across the GPU, the CPU and disk by accelerate (a dict map and ``"auto"`` with ``max_memory``)
  computes what the whole model computes, for every hook and every intervention.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_models import bert_config, build, gpt2_config, llama_config, reference, save, transformers
from test_families_dense import GEMMA, LLAMA, PHI3
from test_moe import SPECS as MOE_SPECS
from test_steering import dictionary
from viz_model import ablation, attribution, generate, load_model, patching

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (docs/memory.md: On a GPU)")

LOGITS_ATOL, PATTERN_ATOL, ATOL = 1e-4, 1e-5, 1e-4
GPU = torch.device("cuda:0")

FAMILIES = {
    "gpt2": ("GPT2LMHeadModel", lambda: gpt2_config(vocab_size=257, n_embd=40, n_head=5, n_layer=3, n_inner=72,
                                                    tie_word_embeddings=False)),
    "bert": ("BertForMaskedLM", bert_config),
    "llama3_rope": ("LlamaForCausalLM", lambda: transformers.LlamaConfig(**LLAMA, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64})),
    "qwen2": ("Qwen2ForCausalLM", lambda: llama_config("Qwen2Config")),
    "qwen3": ("Qwen3ForCausalLM", lambda: transformers.Qwen3Config(**{**LLAMA, "num_key_value_heads": 5,
                                                                      "num_attention_heads": 5})),
    "gpt_neox": ("GPTNeoXForCausalLM", lambda: transformers.GPTNeoXConfig(
        vocab_size=103, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=58,
        max_position_embeddings=64, rotary_pct=0.5)),
    "opt": ("OPTForCausalLM", lambda: transformers.OPTConfig(
        vocab_size=89, hidden_size=30, num_hidden_layers=2, ffn_dim=46, num_attention_heads=5,
        max_position_embeddings=40, word_embed_proj_dim=30)),
    "gemma": ("GemmaForCausalLM", lambda: transformers.GemmaConfig(**GEMMA)),
    "gemma2": ("Gemma2ForCausalLM", lambda: transformers.Gemma2Config(
        **GEMMA, sliding_window=4, query_pre_attn_scalar=20, attn_logit_softcapping=1.5, final_logit_softcapping=2.0)),
    "phi3": ("Phi3ForCausalLM", lambda: transformers.Phi3Config(**PHI3)),
    **{name: MOE_SPECS[name] for name in ("mixtral", "qwen2_moe")},
}


def _ids(vocab: int, n: int = 17, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_parity_on_the_gpu(name, tmp_path):
    cls, make = FAMILIES[name]
    config = make()
    config._experts_implementation = "eager"
    ref = build(cls, config)
    ours, _ = load_model(save(ref, tmp_path / name), device="cuda")
    assert ours.device.type == "cuda"
    ids = _ids(ours.cfg.d_vocab)
    ref_out = reference(ref.to(GPU), ids.to(GPU))
    out, cache = ours.run_with_cache(ids.to(GPU))
    assert out.device.type == "cuda"
    assert (out - ref_out.logits).abs().max().item() <= LOGITS_ATOL
    for i, ref_pattern in enumerate(ref_out.attentions):
        assert (cache[f"blocks.{i}.attn.hook_pattern"] - ref_pattern).abs().max().item() <= PATTERN_ATOL, i


# ------------------------------------------------------------------------ interventions: GPU vs CPU, same weights


@pytest.fixture(scope="module")
def cpu_and_gpu(tmp_path_factory):
    """The same random Llama (GQA, untied) loaded on the CPU and on the GPU."""
    folder = save(build("LlamaForCausalLM", llama_config(num_hidden_layers=3, tie_word_embeddings=False), seed=5),
                  tmp_path_factory.mktemp("llama") / "model")
    return load_model(folder)[0], load_model(folder, device="cuda")[0]


def _close(a, b, atol=ATOL):
    torch.testing.assert_close(torch.as_tensor(a).cpu(), torch.as_tensor(b).cpu(), atol=atol, rtol=0)


def _same_cache(model, reference, ids):
    """``model`` (on the GPU, whole or spread) and ``reference`` (the CPU) record the same logits and hooks; returns
    the reference's cache and the model's."""
    ref_logits, ref = reference.run_with_cache(ids)
    logits, cache = model.run_with_cache(ids.to(GPU))
    _close(logits, ref_logits)
    assert set(cache) == set(ref)
    for name in ref:
        _close(cache[name], ref[name])
    return ref, cache


def test_every_cached_activation_on_the_gpu_equals_the_cpu(cpu_and_gpu):
    cpu, gpu = cpu_and_gpu
    _, cache = _same_cache(gpu, cpu, _ids(cpu.cfg.d_vocab, 11))
    assert all(value.device.type == "cuda" for value in cache.values())


def test_interventions_on_the_gpu_equal_the_cpu(cpu_and_gpu):
    cpu, gpu = cpu_and_gpu
    clean, corrupted = _ids(cpu.cfg.d_vocab, 9, 2), _ids(cpu.cfg.d_vocab, 9, 3)
    heads = [(0, 1), (2, 0)]
    _close(ablation.ablate_heads(gpu, clean.to(GPU), heads), ablation.ablate_heads(cpu, clean, heads))
    _close(ablation.head_ablation_effects(gpu, clean.to(GPU), 7), ablation.head_ablation_effects(cpu, clean, 7))
    metric = patching.logit_diff_metric(3, 5)
    sweeps = ["get_act_patch_resid_pre", "get_act_patch_attn_out", "get_act_patch_mlp_out",
              "get_act_patch_attn_head_out_all_pos", "get_attr_patch_resid_pre", "get_attr_patch_attn_out",
              "get_attr_patch_mlp_out", "get_attr_patch_attn_head_out_all_pos"]
    results = {}
    for key, model, tokens in (("cpu", cpu, (clean, corrupted)), ("gpu", gpu, (clean.to(GPU), corrupted.to(GPU)))):
        _, cache = model.run_with_cache(tokens[0])
        results[key] = {fn: getattr(patching, fn)(model, tokens[1], cache, metric) for fn in sweeps}
        results[key]["dla"] = attribution.direct_logit_attribution(model, cache, 7)
        results[key]["parts"] = patching.component_outputs(model, cache)
    for fn in sweeps:
        assert results["gpu"][fn].shape == results["cpu"][fn].shape, fn
        _close(results["gpu"][fn], results["cpu"][fn])
    assert results["gpu"]["dla"].keys() == results["cpu"]["dla"].keys()
    assert all(abs(results["gpu"]["dla"][k] - results["cpu"]["dla"][k]) <= ATOL for k in results["cpu"]["dla"])
    for key, value in results["cpu"]["parts"].items():
        _close(results["gpu"]["parts"][key], value)


def test_generation_and_the_apps_trace_on_the_gpu(cpu_and_gpu):
    from viz_model.tokenizer import IdTokenizer
    from viz_ui.analysis.text_trace import run_trace

    cpu, gpu = cpu_and_gpu
    prompt = _ids(cpu.cfg.d_vocab, 5, 4)[0].tolist()
    record = ["blocks.2.attn.hook_k", "hook_logits"]
    a, b = generate(cpu, prompt, 8, temperature=0.0, record=record), generate(gpu, prompt, 8, temperature=0.0,
                                                                             record=record)
    assert [s.token_id for s in a] == [s.token_id for s in b]
    for x, y in zip(a, b):
        assert abs(x.model_prob - y.model_prob) <= ATOL
        for name in record:
            _close(y.cache[name], x.cache[name])
    text = " ".join(map(str, _ids(cpu.cfg.d_vocab, 12, 6)[0].tolist()))
    tok = IdTokenizer(cpu.cfg.d_vocab)
    ref, trace = run_trace(cpu, tok, text), run_trace(gpu, tok, text)
    assert np.array_equal(trace.ids, ref.ids)
    for name in ("blocks.1.attn.hook_pattern", "blocks.2.hook_resid_post", "blocks.0.attn.hook_v"):
        value = trace.arrays[name]
        assert isinstance(value, np.ndarray), name  # the views read host arrays
        _close(torch.tensor(value), torch.tensor(ref.arrays[name]))


def test_dictionaries_on_the_cpu_read_steer_and_ablate_a_model_on_the_gpu(cpu_and_gpu):
    from viz_model.features import feature_acts, head_contributions, logit_effects, train_dictionary
    from viz_model.interventions.steering import ablate_features, contrastive_direction, steer

    cpu, gpu = cpu_and_gpu
    d_model, ids = cpu.cfg.d_model, _ids(cpu.cfg.d_vocab, 10, 7)
    sae = dictionary("blocks.1.hook_resid_post", d_model)
    transcoder = dictionary("blocks.1.ln2.hook_normalized", d_model, out="blocks.1.hook_mlp_out", seed=1)
    for d in (sae, transcoder):
        acts = feature_acts(gpu, ids.to(GPU), d)
        assert acts.device.type == "cpu"
        _close(acts, feature_acts(cpu, ids, d))
        _close(ablate_features(gpu, ids.to(GPU), d, [1, 4, 9]), ablate_features(cpu, ids, d, [1, 4, 9]))
        _close(head_contributions(gpu, ids, d, 3, 6), head_contributions(cpu, ids, d, 3, 6))
    _close(logit_effects(gpu, sae, 5), logit_effects(cpu, sae, 5))
    other = _ids(cpu.cfg.d_vocab, 7, 8)
    direction = contrastive_direction(gpu, ids.to(GPU), other.to(GPU), "blocks.0.hook_resid_post")
    _close(direction, contrastive_direction(cpu, ids, other, "blocks.0.hook_resid_post"))
    _close(steer(gpu, ids.to(GPU), "blocks.0.hook_resid_post", direction.cpu(), 3.0),
           steer(cpu, ids, "blocks.0.hook_resid_post", direction.cpu(), 3.0))
    stream = [_ids(cpu.cfg.d_vocab, 64, 9)[0].tolist()]
    a, _ = train_dictionary(gpu, "blocks.1.hook_resid_post", stream, 16, k=4, window=16, steps=5, batch_size=32)
    b, _ = train_dictionary(cpu, "blocks.1.hook_resid_post", stream, 16, k=4, window=16, steps=5, batch_size=32)
    assert a.W_enc.device.type == "cpu"  # trained where the dictionaries live
    _close(a.W_enc, b.W_enc, atol=1e-4)


# ---------------------------------------------------------------------- accelerate: GPU, then CPU, then disk


@pytest.fixture(scope="module", params=["dict", "auto"])
def spread(request, tmp_path_factory):
    """(the Llama loaded whole on the CPU, the same folder spread over cuda:0, the CPU and disk)."""
    root = tmp_path_factory.mktemp(f"spread-{request.param}")
    folder = save(build("LlamaForCausalLM", llama_config(num_hidden_layers=4, tie_word_embeddings=False), seed=5),
                  root / "model")
    whole, _ = load_model(folder)
    if request.param == "dict":
        kw = dict(device_map={"": 0, "blocks.2": "cpu", "blocks.3": "disk"})
    else:
        size = lambda m: sum(p.numel() * p.element_size() for p in m.parameters())  # noqa: E731
        block, rest = size(whole.blocks[0]), size(whole) - sum(size(b) for b in whole.blocks)
        kw = dict(device_map="auto", max_memory={0: rest + 2 * block + block // 2, "cpu": 2 * block + block // 2})
    placed, _ = load_model(folder, offload_folder=root / "offload", **kw)
    return whole, placed


def test_the_model_really_spreads_over_gpu_cpu_and_disk(spread):
    _, placed = spread
    where = {str(v) for v in placed.hf_device_map.values()}
    assert "0" in where or "cuda:0" in where, placed.hf_device_map
    assert where - {"0", "cuda:0"}, placed.hf_device_map  # not everything on the GPU
    assert placed.device == GPU


def test_a_spread_model_equals_the_whole_one(spread):
    whole, placed = spread
    ids = _ids(whole.cfg.d_vocab, 9)
    ref, cache = _same_cache(placed, whole, ids)
    heads = [(0, 1), (3, 0)]
    _close(ablation.ablate_heads(placed, ids.to(GPU), heads), ablation.ablate_heads(whole, ids, heads))
    metric = patching.logit_diff_metric(3, 5)
    corrupted = _ids(whole.cfg.d_vocab, 9, 3)
    for fn in ("get_act_patch_resid_pre", "get_act_patch_attn_head_out_all_pos", "get_attr_patch_resid_pre",
               "get_attr_patch_attn_head_out_all_pos"):
        a = getattr(patching, fn)(whole, corrupted, ref, metric)
        b = getattr(patching, fn)(placed, corrupted.to(GPU), cache, metric)
        _close(b, a)
    prompt = ids[0, :5].tolist()
    a, b = generate(whole, prompt, 6, temperature=0.0), generate(placed, prompt, 6, temperature=0.0)
    assert [s.token_id for s in a] == [s.token_id for s in b]
