"""Interventions (run_with_hooks, head ablation, activation patching, direct logit attribution), each checked by
an independent recomputation on a `transformers` GPT-2 of a shape nobody tuned for: the intervention is done
there with PyTorch's own module hooks on `transformers`' modules, never with this project's code."""

from __future__ import annotations

import pytest
import torch

from hf_models import build, gpt2_config, save
from viz_model import Config, VizTransformer, ablation, attribution, load_model, patching

ATOL = 1e-4
N_LAYERS, N_HEADS, D_MODEL = 3, 5, 40
D_HEAD = D_MODEL // N_HEADS


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(ours, transformers' GPT2LMHeadModel) with the same random weights, and a clean/corrupted prompt pair."""
    ref = build("GPT2LMHeadModel", gpt2_config(vocab_size=97, n_embd=D_MODEL, n_head=N_HEADS, n_layer=N_LAYERS,
                                               n_inner=72, n_positions=32), seed=3)
    model, _ = load_model(save(ref, tmp_path_factory.mktemp("gpt2") / "gpt2"))
    gen = torch.Generator().manual_seed(1)
    clean = torch.randint(0, 97, (1, 9), generator=gen)
    corrupted = clean.clone()
    corrupted[0, 2], corrupted[0, 5] = (clean[0, 2] + 11) % 97, (clean[0, 5] + 29) % 97
    return model, ref, clean, corrupted


def hf_logits(ref, ids, module_hooks=()):
    """transformers' logits with PyTorch forward hooks ``(module, kind, fn)`` (kind "pre" or "post") attached."""
    handles = [(m.register_forward_pre_hook(fn) if kind == "pre" else m.register_forward_hook(fn))
               for m, kind, fn in module_hooks]
    try:
        with torch.no_grad():
            return ref(ids).logits
    finally:
        for h in handles:
            h.remove()


def record(ref, ids, module, kind="post"):
    """The output (or, for "pre", the first input) of one `transformers` module on ``ids``."""
    seen = {}

    def grab(m, args, out=None):
        seen["x"] = (args[0] if kind == "pre" else (out[0] if isinstance(out, tuple) else out)).detach().clone()
    hf_logits(ref, ids, [(module, kind, grab)])
    return seen["x"]


def test_run_with_hooks_zero_ablation_equals_zeroing_c_proj_rows(pair):
    model, ref, clean, _ = pair
    layer, head = 1, 3

    def zero(z, hook):
        z = z.clone()
        z[:, :, head] = 0
        return z
    ours = model.run_with_hooks(clean, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])
    # transformers: GPT-2's Conv1D weight is [in, out]; a head's rows of c_proj are its d_head input features.
    w = ref.transformer.h[layer].attn.c_proj.weight
    saved = w.detach().clone()
    with torch.no_grad():
        w[head * D_HEAD:(head + 1) * D_HEAD] = 0
    try:
        expected = hf_logits(ref, clean)
    finally:
        with torch.no_grad():
            w.copy_(saved)
    assert (ours - expected).abs().max().item() <= ATOL
    assert (ours - hf_logits(ref, clean)).abs().max().item() > 1e-3  # the head mattered
    # the same through the ablation module, and the hooks are gone afterwards
    torch.testing.assert_close(ablation.ablate_heads(model, clean, [(layer, head)]), ours)
    assert not any(h.active for h in model.hook_dict.values())


def test_run_with_hooks_predicates_none_return_and_cleanup_on_error(pair):
    model, _, clean, _ = pair
    seen = []
    plain = model(clean)
    out = model.run_with_hooks(clean, fwd_hooks=[(lambda n: n.endswith("hook_resid_pre"), lambda x, hook: seen.append(hook.name))])
    assert seen == [f"blocks.{i}.hook_resid_pre" for i in range(N_LAYERS)]
    torch.testing.assert_close(out, plain)  # fn returning None leaves the value alone

    def boom(x, hook):
        raise RuntimeError("hook failed")
    with pytest.raises(RuntimeError, match="hook failed"):
        model.run_with_hooks(clean, fwd_hooks=[("blocks.0.hook_mlp_out", boom), (lambda n: "hook_q" in n, lambda x, h: None)])
    assert not any(h.active for h in model.hook_dict.values())
    with pytest.raises(KeyError, match="no hook named"):
        model.run_with_hooks(clean, fwd_hooks=[("blocks.9.hook_z", boom)])


def test_mean_ablation_equals_the_mean_of_the_heads_input_to_c_proj(pair):
    model, ref, clean, corrupted = pair
    layer, head = 2, 0
    means = ablation.head_means(model, corrupted)  # a reference text
    merged = record(ref, corrupted, ref.transformer.h[layer].attn.c_proj, "pre")  # [1, pos, n_heads * d_head]
    mean = merged[0, :, head * D_HEAD:(head + 1) * D_HEAD].mean(0)

    def fill(module, args):
        x = args[0].clone()
        x[:, :, head * D_HEAD:(head + 1) * D_HEAD] = mean
        return (x,)
    expected = hf_logits(ref, clean, [(ref.transformer.h[layer].attn.c_proj, "pre", fill)])
    ours = ablation.ablate_heads(model, clean, [(layer, head)], kind="mean", means=means)
    assert (ours - expected).abs().max().item() <= ATOL


def test_per_head_effects_batched_equal_one_run_per_head(pair, monkeypatch):
    model, _, clean, _ = pair
    token = int(model(clean)[0, -1].argmax())
    monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", "0.05")  # a few copies per pass: the chunking is exercised too
    effects = ablation.head_ablation_effects(model, clean, token, base=[(0, 1)])
    logp = lambda logits: torch.log_softmax(logits[0, -1], -1)[token]
    base = logp(ablation.ablate_heads(model, clean, [(0, 1)]))
    for layer in range(N_LAYERS):
        for head in range(N_HEADS):
            alone = logp(ablation.ablate_heads(model, clean, {(0, 1), (layer, head)})) - base
            assert abs(effects[layer, head].item() - alone.item()) <= ATOL
    assert effects[0, 1] == 0 and effects.abs().max() > 1e-3
    with pytest.raises(ValueError, match="no head L3H0"):
        ablation.head_ablation_effects(model, clean, token, base=[(3, 0)])


def metric_for(model, clean):
    logits = model(clean)[0, -1]
    answer, wrong = logits.topk(2).indices.tolist()
    return answer, wrong, patching.logit_diff_metric(answer, wrong)


def test_patching_resid_attn_and_mlp_equal_patched_transformers_runs(pair):
    model, ref, clean, corrupted = pair
    answer, wrong, metric = metric_for(model, clean)
    _, clean_cache = model.run_with_cache(clean)
    hf_metric = lambda logits: (logits[0, -1, answer] - logits[0, -1, wrong]).item()
    blocks = ref.transformer.h
    for fn, module_of, kind in [(patching.get_act_patch_resid_pre, lambda l: blocks[l], "pre"),
                                (patching.get_act_patch_attn_out, lambda l: blocks[l].attn, "post"),
                                (patching.get_act_patch_mlp_out, lambda l: blocks[l].mlp, "post")]:
        grid = fn(model, corrupted, clean_cache, metric)
        assert grid.shape == (N_LAYERS, clean.shape[1])
        for layer in range(N_LAYERS):
            source = record(ref, clean, module_of(layer), kind)
            for pos in range(clean.shape[1]):
                if kind == "pre":
                    def patch(m, args, pos=pos, source=source):
                        x = args[0].clone()
                        x[:, pos] = source[:, pos]
                        return (x,) + tuple(args[1:])
                else:
                    def patch(m, args, out, pos=pos, source=source):
                        first = out[0] if isinstance(out, tuple) else out
                        first = first.clone()
                        first[:, pos] = source[:, pos]
                        return (first,) + tuple(out[1:]) if isinstance(out, tuple) else first
                expected = hf_metric(hf_logits(ref, corrupted, [(module_of(layer), kind, patch)]))
                assert abs(grid[layer, pos].item() - expected) <= ATOL, (fn.__name__, layer, pos)
    # patching the whole residual stream at layer 0 restores the clean run exactly at every position that differs
    full = patching.get_act_patch_resid_pre(model, corrupted, clean_cache, metric)
    assert abs(full[0, 2].item() - metric(model(corrupted)).item()) > 1e-4  # a corrupted position matters


def test_patching_head_outputs_equal_patched_c_proj_inputs(pair):
    model, ref, clean, corrupted = pair
    answer, wrong, metric = metric_for(model, clean)
    _, clean_cache = model.run_with_cache(clean)
    passes = []
    count = lambda x, hook: passes.append((hook.name, x.shape[0]))
    with model.hooks([("hook_embed", count), ("hook_logits", count)]):
        grid = patching.get_act_patch_attn_head_out_all_pos(model, corrupted, clean_cache, metric)
    # one corrupted run (embedded once), then one batched pass per layer starting at that layer's input
    assert passes == [("hook_embed", 1), ("hook_logits", 1)] + [("hook_logits", N_HEADS)] * N_LAYERS
    with model.hooks([("hook_embed", count)]):
        passes.clear()
        full = patching.get_act_patch_attn_head_out_all_pos(model, corrupted, clean_cache, metric, reuse_prefix=False)
    assert passes == [("hook_embed", N_LAYERS * N_HEADS)]  # every cell in one batched forward of the whole model
    assert (full - grid).abs().max().item() <= 1e-5
    assert grid.shape == (N_LAYERS, N_HEADS)
    for layer in range(N_LAYERS):
        c_proj = ref.transformer.h[layer].attn.c_proj
        source = record(ref, clean, c_proj, "pre")
        for head in range(N_HEADS):
            cols = slice(head * D_HEAD, (head + 1) * D_HEAD)

            def patch(m, args, cols=cols, source=source):
                x = args[0].clone()
                x[:, :, cols] = source[:, :, cols]
                return (x,)
            logits = hf_logits(ref, corrupted, [(c_proj, "pre", patch)])
            assert abs(grid[layer, head].item() - (logits[0, -1, answer] - logits[0, -1, wrong]).item()) <= ATOL


def test_patching_refuses_prompts_of_different_lengths_and_normalises(pair):
    model, _, clean, corrupted = pair
    _, _, metric = metric_for(model, clean)
    _, clean_cache = model.run_with_cache(clean)
    with pytest.raises(ValueError, match="same length"):
        patching.get_act_patch_resid_pre(model, corrupted[:, :-1], clean_cache, metric)
    one = clean.clone()
    one[0, 5] = (clean[0, 5] + 29) % 97  # differs from the clean prompt at one position only
    clean_value, corrupted_value = metric(model(clean)).item(), metric(model(one)).item()
    grid = patching.normalise(patching.get_act_patch_resid_pre(model, one, clean_cache, metric),
                              clean_value, corrupted_value)
    # Layer 0's input at the one differing position makes the run the clean run (1); at any other position the
    # patch writes what is already there (0).
    assert abs(grid[0, 5].item() - 1) <= 1e-3  # normalised: float noise of batched runs over a small span
    assert grid[0, [0, 1, 2, 3, 4, 6, 7, 8]].abs().max().item() <= 1e-3
    with pytest.raises(ValueError, match="nothing to restore"):
        patching.normalise(grid, 1.0, 1.0)


def test_patch_lens_moves_only_later_components(pair):
    model, _, clean, corrupted = pair
    _, clean_cache = model.run_with_cache(clean)
    moved = patching.patch_downstream(model, corrupted, clean_cache, "resid_pre", layer=1, index=2)
    assert all(v == 0 for k, v in moved.items() if k.startswith("L0"))
    assert max(v for k, v in moved.items() if k.startswith(("L1", "L2"))) > 1e-3
    head = patching.patch_downstream(model, corrupted, clean_cache, "head", layer=1, index=4)
    assert head["L1H4"] > 0 and head["L1H3"] == 0 and head["L0.mlp"] == 0


def test_direct_logit_attribution_sums_to_the_logit_and_its_last_mlp_term(pair):
    model, ref, clean, _ = pair
    logits, cache = model.run_with_cache(clean, names_filter=attribution.attribution_hooks(model))
    token = 17
    dla = attribution.direct_logit_attribution(model, cache, token, pos=-1)
    assert set(dla) == {"embed", "pos_embed", "bias"} | {f"L{l}H{h}" for l in range(N_LAYERS) for h in range(N_HEADS)} \
        | {f"L{l}.attn_bias" for l in range(N_LAYERS)} | {f"L{l}.mlp" for l in range(N_LAYERS)}
    assert abs(sum(dla.values()) - logits[0, -1, token].item()) <= 1e-3
    # transformers' own last MLP output through ln_f with the scale of the final residual stream, frozen
    mlp = record(ref, clean, ref.transformer.h[-1].mlp)[0, -1]
    final = record(ref, clean, ref.transformer.ln_f, "pre")[0, -1]
    ln_f, w_u = ref.transformer.ln_f, ref.lm_head.weight[token]
    scale = (final.var(unbiased=False) + ln_f.eps).sqrt()
    expected = ((mlp - mlp.mean()) / scale * ln_f.weight) @ w_u
    assert abs(dla[f"L{N_LAYERS - 1}.mlp"] - expected.item()) <= 1e-4
    with pytest.raises(ValueError, match="outside the vocabulary"):
        attribution.direct_logit_attribution(model, cache, 97)


def test_attribution_and_patching_on_an_encoder_decoder_and_refusals():
    cfg = Config(n_layers=2, d_model=24, n_heads=3, d_head=8, d_mlp=40, d_vocab=31, n_ctx=16, n_encoder_layers=2,
                 norm="rmsnorm", positional="learned")
    model = VizTransformer(cfg)
    model.init_weights(seed=5)
    for p in model.parameters():  # larger weights: far from uniform attention
        p.data.mul_(8 if p.ndim > 1 else 1)
    model.eval()
    src = torch.tensor([[3, 9, 4, 1, 7]])
    tgt, cor = torch.tensor([[0, 5, 2, 8]]), torch.tensor([[0, 6, 2, 8]])
    logits, cache = model.run_with_cache(tgt, src_tokens=src)
    dla = attribution.direct_logit_attribution(model, cache, 4, pos=2)
    assert {"L0X2", "L1X0", "L1.cross_attn_bias", "L1H2"} <= set(dla)
    assert abs(sum(dla.values()) - logits[0, 2, 4].item()) <= 1e-3
    metric = patching.prob_metric(4, pos=-1)
    grid = patching.get_act_patch_resid_pre(model, cor, cache, metric, src_tokens=src)
    assert grid.shape == (2, 4)
    # patching every layer's first input at the one differing position restores the clean probability
    assert abs(grid[0, 1].item() - metric(logits).item()) <= 1e-5
    post = VizTransformer(Config(n_layers=1, d_model=8, n_heads=2, d_head=4, d_mlp=8, d_vocab=11, n_ctx=8,
                                 norm_placement="post", final_norm=False)).eval()
    _, post_cache = post.run_with_cache(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="pre-LN"):
        attribution.direct_logit_attribution(post, post_cache, 3)
