"""Dtypes and devices (issue 16): ``load_model(..., dtype="auto")`` keeps a bfloat16 checkpoint in bfloat16 and agrees
with ``transformers``' own bfloat16 forward; float32 (the default) agrees with a float32 forward of the same bfloat16
weights to 1e-4; norms stay float32 and attention patterns are computed in float32; bad settings are one line; the
app renders every page on a bfloat16 model. Load time and peak memory per dtype: bench/load_dtype.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_models import build, gpt2_config, llama_config, reference, save, transformers
from helpers import PAGES, open_with_model
from viz_model import CheckpointError, load_model
from viz_model.loading.checkpoint import save_checkpoint
from viz_model.loading.weights import norm_parameters
from viz_ui.analysis.text_trace import run_trace

BF16_EPS = 2.0 ** -7  # bfloat16's spacing just above 1 (8 bits of mantissa)
IDS = torch.tensor([[5, 17, 3, 44, 81, 9, 17, 3, 44, 60, 2, 33, 71, 17, 3]])


def bf16_folder(tmp_path_factory, name: str, cls: str, config):
    """A `transformers` model saved in bfloat16 (as Hugging Face ships most checkpoints), the bfloat16 model itself,
    and a float32 model holding exactly those bfloat16 weights."""
    model = build(cls, config).to(torch.bfloat16)
    folder = save(model, tmp_path_factory.mktemp(name))
    wide = build(cls, config.__class__(**config.to_dict()))
    wide.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    return folder, model.eval(), wide.eval()


@pytest.fixture(scope="module", params=[("LlamaForCausalLM", llama_config), ("GPT2LMHeadModel", gpt2_config)],
                ids=["llama", "gpt2"])
def family(request, tmp_path_factory):
    cls, make = request.param
    return bf16_folder(tmp_path_factory, cls, cls, make())


def test_auto_keeps_bfloat16_and_agrees_with_transformers_bfloat16(family):
    folder, hf16, _ = family
    model, _ = load_model(folder, dtype="auto")
    assert model.dtype == torch.bfloat16
    norms = norm_parameters(model)
    assert norms and all(p.dtype == torch.float32 for n, p in model.named_parameters() if n in norms)
    assert all(p.dtype == torch.bfloat16 for n, p in model.named_parameters() if n not in norms)
    theirs = reference(hf16, IDS)
    logits, cache = model.run_with_cache(IDS)
    assert logits.dtype == torch.bfloat16 and cache["blocks.0.hook_resid_post"].dtype == torch.bfloat16
    scale = theirs.logits.float().abs().max().item()
    # two bfloat16 implementations round differently (transformers rounds the scores to bfloat16, ours keeps them in
    # float32): a few units of bfloat16's spacing, relative to the logits' size
    assert (logits.float() - theirs.logits.float()).abs().max().item() <= 4 * BF16_EPS * scale
    for i, attn in enumerate(theirs.attentions):
        pattern = cache[f"blocks.{i}.attn.hook_pattern"]
        assert pattern.dtype == torch.float32  # computed in float32 from the model's q and k
        assert (pattern - attn.float()).abs().max().item() <= 2 * BF16_EPS


def test_float32_default_equals_a_float32_forward_of_the_bfloat16_weights(family):
    folder, _, wide = family
    model, _ = load_model(folder)
    assert model.dtype == torch.float32
    theirs = reference(wide, IDS)
    logits, cache = model.run_with_cache(IDS)
    assert (logits - theirs.logits).abs().max().item() <= 1e-4
    for i, attn in enumerate(theirs.attentions):
        assert (cache[f"blocks.{i}.attn.hook_pattern"] - attn).abs().max().item() <= 1e-5


def test_bfloat16_weights_are_the_files_own_bytes(family):
    """dtype="auto" moves the file's tensors into the model without converting them: every matrix equals the
    file's bfloat16 values bit for bit (transposed where the layouts differ)."""
    folder, hf16, _ = family
    model, _ = load_model(folder, dtype="auto")
    if hasattr(hf16, "lm_head") and isinstance(hf16, transformers.LlamaForCausalLM):
        assert torch.equal(model.W_U, hf16.lm_head.weight.T)
        assert torch.equal(model.blocks[1].mlp.W_out, hf16.model.layers[1].mlp.down_proj.weight.T)
    else:
        assert torch.equal(model.embed.W_E, hf16.transformer.wte.weight)
        assert torch.equal(model.blocks[1].mlp.W_in, hf16.transformer.h[1].mlp.c_fc.weight)


def test_explicit_dtypes_and_native_checkpoints(tmp_path):
    model, tok = load_model()  # the shipped model, float32
    half, _ = load_model(None, dtype="float16")
    assert half.dtype == torch.float16 and model.dtype == torch.float32
    assert torch.equal(half.embed.W_E, model.embed.W_E.half())
    path = save_checkpoint(model, tok, tmp_path / "half.safetensors", dtype=torch.float16)
    assert load_model(path, dtype="auto")[0].dtype == torch.float16  # the file's dtype
    assert load_model(path)[0].dtype == torch.float32  # float32 unless asked
    with torch.no_grad():  # the float16 model's output follows the float32 one's to float16 precision
        a, b = model(IDS[:, :8]), half(IDS[:, :8]).float()
    assert (a - b).abs().max().item() <= 0.05 * a.abs().max().item()


@pytest.mark.parametrize("kwargs, words", [({"dtype": "int8"}, "dtype 'int8' is not supported"),
                                           ({"dtype": torch.float64}, "not supported"),
                                           ({"device": "tpu"}, "device 'tpu' is not known")])
def test_bad_dtype_or_device_is_one_line(kwargs, words):
    with pytest.raises(CheckpointError, match=words) as info:
        load_model(None, **kwargs)
    assert "\n" not in str(info.value)


def test_cuda_when_present_else_a_clear_refusal():
    if torch.cuda.is_available():
        model, _ = load_model(None, device="cuda")
        assert model.device.type == "cuda"
        cpu, _ = load_model(None)
        with torch.no_grad():
            assert (model(IDS[:, :8].cuda()).cpu() - cpu(IDS[:, :8])).abs().max().item() <= 1e-3
    else:
        with pytest.raises(CheckpointError, match="no CUDA GPU"):
            load_model(None, device="cuda")
        assert load_model(None, device="auto")[0].device.type == "cpu"


def test_trace_of_a_bfloat16_model_shows_its_own_numbers_as_float32(family):
    folder, _, _ = family
    model, _ = load_model(folder, dtype="auto")
    from viz_model.tokenizer import IdTokenizer
    trace = run_trace(model, IdTokenizer(model.cfg.d_vocab), " ".join(map(str, IDS[0].tolist())))
    _, cache = model.run_with_cache(IDS)
    for name in ("blocks.1.hook_resid_post", "blocks.0.attn.hook_pattern", "hook_logits"):
        assert trace.arrays[name].dtype == np.float32
        assert np.array_equal(trace.arrays[name], cache[name][0].float().numpy())


@pytest.fixture(scope="module")
def bf16_models(tmp_path_factory):
    from viz_model.tokenizer import IdTokenizer
    folder, _, _ = bf16_folder(tmp_path_factory, "pages", "LlamaForCausalLM", llama_config())
    model, _ = load_model(folder, dtype="auto")
    return {"bf16-llama": (model, IdTokenizer(model.cfg.d_vocab))}


@pytest.mark.parametrize("page", [None, *PAGES, "pages/interventions.py", "pages/moe.py"])
def test_every_page_renders_on_a_bfloat16_model(bf16_models, page):
    open_with_model(bf16_models, "bf16-llama", page, text="5 17 3 44 81 9 17 3 44 60", head=(0, 0), errors=False)
