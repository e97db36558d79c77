"""Fast causal sweeps (issue 23): prefix reuse gives the numbers of whole-model cells, attribution patching equals an
independent gradient computation on `transformers` models, the progress callback reports and cancels, and the cost
in forward-equivalents matches the work really done."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from hf_models import build, gpt2_config, llama_config, save
from viz_model import Config, VizTransformer, ablation, load_model, patching
from viz_model.interventions import batching

SMALL = dict(n_layers=3, d_model=24, n_heads=3, d_head=8, d_mlp=40, d_vocab=41, n_ctx=16)
FAMILIES = {  # the architecture switches that change what a block reads besides the residual stream
    "gpt2": dict(positional="learned", mlp="gelu"),
    "llama": dict(positional="rotary", norm="rmsnorm", mlp="swiglu", n_kv_heads=1, attn_bias=False, mlp_bias=False,
                  tied_embeddings=False),
    "enc-dec": dict(positional="learned", norm="rmsnorm", n_encoder_layers=2),
    "t5": dict(positional="none", norm="rmsnorm", rel_pos_buckets=8, rel_pos_max_distance=12, n_encoder_layers=1,
               attn_scale=1.0, attn_bias=False, mlp_bias=False),
    "moe": dict(positional="rotary", norm="rmsnorm", mlp="swiglu", n_experts=4, experts_per_token=2, attn_bias=False,
                mlp_bias=False),
    "bert": dict(positional="learned", norm_placement="post", final_norm=False, embed_norm=True, n_token_types=2,
                 causal=False, lm_head="mlm", unembed_bias=True),
}


def random_model(family: str) -> tuple[VizTransformer, dict]:
    """A small random model of the family and the keyword arguments of its runs (source ids, segment ids)."""
    model = VizTransformer(Config(**SMALL, **FAMILIES[family]))
    model.init_weights(seed=7)
    with torch.no_grad():
        for p in model.parameters():  # larger weights: attention far from uniform, patches that matter
            p.mul_(6 if p.ndim > 1 else 1)
    model.eval()
    kw = {}
    if model.encoder is not None:
        kw["src_tokens"] = torch.tensor([[3, 9, 4, 1, 7, 2]])
    if family == "bert":
        kw["token_type_ids"] = torch.tensor([[0, 0, 0, 1, 1, 1]])
    return model, kw


def per_cell(model, tokens, cells, hook_for, fn_for, reduce, **kw):
    """The plain reference: one whole-model run_with_hooks per cell, nothing batched or reused."""
    return torch.tensor([float(reduce(model.run_with_hooks(tokens, [(hook_for(cell), fn_for(cell))], **kw)))
                         for cell in cells])


@pytest.mark.parametrize("family", list(FAMILIES))
@torch.no_grad()
def test_prefix_reuse_equals_whole_model_cells(family, monkeypatch):
    model, kw = random_model(family)
    clean, corrupted = torch.tensor([[5, 11, 2, 30, 8, 17]]), torch.tensor([[5, 11, 29, 30, 8, 3]])
    n_layers, n_heads, n_pos = model.cfg.n_layers, model.cfg.n_heads, clean.shape[1]
    logits, clean_cache = model.run_with_cache(clean, **kw)
    answer, wrong = logits[0, -1].topk(2).indices.tolist()
    metric = patching.logit_diff_metric(answer, wrong)
    monkeypatch.setattr(batching, "copies_per_pass", lambda model, n_pos: 4)  # a layer's 6 positions take 2 passes
    positions = [(layer, pos) for layer in range(n_layers) for pos in range(n_pos)]
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]

    def put(name, index):  # replace the cell's slice by the clean run's
        def fn(x, hook):
            x = x.clone()
            x[index] = clean_cache[name][index]
            return x
        return fn
    for fn, hook in [(patching.get_act_patch_resid_pre, "hook_resid_pre"), (patching.get_act_patch_attn_out,
                     "hook_attn_out"), (patching.get_act_patch_mlp_out, "hook_mlp_out")]:
        name = lambda cell, hook=hook: f"blocks.{cell[0]}.{hook}"
        expected = per_cell(model, corrupted, positions, name, lambda c, name=name: put(name(c), (slice(None), c[1])),
                            metric, **kw)
        grid = fn(model, corrupted, clean_cache, metric, **kw)
        assert (grid.flatten() - expected).abs().max().item() <= 1e-5, (family, hook)
    name = lambda cell: f"blocks.{cell[0]}.attn.hook_z"
    expected = per_cell(model, corrupted, heads, name, lambda c: put(name(c), (slice(None), slice(None), c[1])),
                        metric, **kw)
    grid = patching.get_act_patch_attn_head_out_all_pos(model, corrupted, clean_cache, metric, **kw)
    assert (grid.flatten() - expected).abs().max().item() <= 1e-5
    assert expected.max() - expected.min() > 1e-3  # the heads matter: the comparison can fail

    # head ablation on top of a base head that is off in every run, including the reference
    token = int(logits[0, -1].argmax())
    logp = lambda out: torch.log_softmax(out[0, -1].float(), -1)[token]
    base = [(1, 2)]

    def zero(layer_heads):
        def fn(z, hook):
            z = z.clone()
            z[:, :, layer_heads] = 0
            return z
        return fn
    reference = float(logp(ablation.ablate_heads(model, clean, base, **kw)))
    effects = ablation.head_ablation_effects(model, clean, token, base=base, **kw)
    for layer, head in heads:
        hooks = [("blocks.1.attn.hook_z", zero([2]))] + [(f"blocks.{layer}.attn.hook_z", zero([head]))]
        alone = float(logp(model.run_with_hooks(clean, hooks, **kw))) - reference
        want = 0.0 if (layer, head) in base else alone
        assert abs(effects[layer, head].item() - want) <= 1e-5, (family, layer, head)


def test_forward_from_a_recorded_layer_input_is_the_forward_pass():
    model, kw = random_model("t5")
    tokens = torch.tensor([[5, 11, 2, 30]])
    n_layers = model.cfg.n_layers
    names = [f"blocks.{layer}.hook_resid_pre" for layer in range(n_layers)] + [f"blocks.{n_layers - 1}.hook_resid_post"]
    logits, cache = model.run_with_cache(tokens, names_filter=names, **kw)
    encoder_out = model.encode(kw["src_tokens"])
    for layer in range(n_layers + 1):  # n_layers: the decode alone, from the last block's output
        seen = []
        with model.hooks([(f"blocks.{i}.hook_resid_pre", lambda x, hook: seen.append(hook.name)) for i in range(n_layers)]
                         + [("hook_logits", lambda x, hook: seen.append(hook.name))]):
            out = model.forward_from(cache[names[layer]], layer, encoder_out=encoder_out)
        torch.testing.assert_close(out, logits, atol=1e-5, rtol=0)
        assert seen == names[layer:n_layers] + ["hook_logits"]  # earlier blocks do not run; hooks downstream fire
    torch.testing.assert_close(model.forward_from(cache[names[1]], 1, **kw), logits, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="start_layer 4"):
        model.forward_from(cache[names[0]], 4, **kw)
    with pytest.raises(ValueError, match="needs src_tokens"):
        model.forward_from(cache[names[0]], 0)
    with pytest.raises(ValueError, match="resid must be"):
        model.forward_from(cache[names[0]][0], 0, **kw)


# ---- attribution patching against transformers' own gradients ----------------------------------------------------

def hf_attribution(ref, clean, corrupted, answer, wrong, sites):
    """``(metric of the corrupted run, [(clean - corrupted) * grad per site])`` computed on a `transformers` model with
    PyTorch module hooks: ``sites`` = ``(module, "pre" | "post")``, the module's first input or its output."""
    def run(ids, grad):
        seen, handles = {}, []
        for i, (module, kind) in enumerate(sites):
            if kind == "pre":
                def grab(m, args, kwargs, i=i):
                    seen[i] = args[0] if args else kwargs["hidden_states"]
                handles.append(module.register_forward_pre_hook(grab, with_kwargs=True))
            else:
                def grab(m, args, out, i=i):
                    seen[i] = out[0] if isinstance(out, tuple) else out
                handles.append(module.register_forward_hook(grab))
        try:
            with torch.set_grad_enabled(grad):
                logits = ref(ids).logits
        finally:
            for h in handles:
                h.remove()
        return logits, [seen[i] for i in range(len(sites))]
    _, clean_acts = run(clean, False)
    logits, acts = run(corrupted, True)
    value = logits[0, -1, answer] - logits[0, -1, wrong]
    grads = torch.autograd.grad(value, acts)
    return value.item(), [((c - a.detach()) * g)[0].detach() for c, a, g in zip(clean_acts, acts, grads)]


HF_MODELS = {
    "gpt2": ("GPT2LMHeadModel", lambda: gpt2_config(vocab_size=97, n_embd=40, n_head=5, n_layer=3, n_inner=72,
                                                    n_positions=32),
             lambda ref: ref.transformer.h, "attn", "mlp", lambda blk: blk.attn.c_proj),
    "llama": ("LlamaForCausalLM", lambda: llama_config(num_hidden_layers=3),  # 6 query heads share 2 key/value heads
              lambda ref: ref.model.layers, "self_attn", "mlp", lambda blk: blk.self_attn.o_proj),
}


@pytest.mark.parametrize("family", list(HF_MODELS))
def test_attribution_patching_equals_transformers_gradients(family, tmp_path):
    cls, config, blocks_of, attn, mlp, o_proj = HF_MODELS[family]
    ref = build(cls, config(), seed=4)
    model, _ = load_model(save(ref, tmp_path / family))
    gen = torch.Generator().manual_seed(2)
    clean = torch.randint(0, 97, (1, 8), generator=gen)
    corrupted = clean.clone()
    corrupted[0, 1], corrupted[0, 4] = (clean[0, 1] + 7) % 97, (clean[0, 4] + 31) % 97
    logits, clean_cache = model.run_with_cache(clean)
    answer, wrong = logits[0, -1].topk(2).indices.tolist()
    metric = patching.logit_diff_metric(answer, wrong)
    blocks = blocks_of(ref)
    cfg = model.cfg
    with torch.no_grad():  # as a page calls it: the gradient is still taken
        ours = {"resid_pre": patching.get_attr_patch_resid_pre(model, corrupted, clean_cache, metric),
                "attn_out": patching.get_attr_patch_attn_out(model, corrupted, clean_cache, metric),
                "mlp_out": patching.get_attr_patch_mlp_out(model, corrupted, clean_cache, metric),
                "head": patching.get_attr_patch_attn_head_out_all_pos(model, corrupted, clean_cache, metric)}
    sites = {"resid_pre": [(b, "pre") for b in blocks], "attn_out": [(getattr(b, attn), "post") for b in blocks],
             "mlp_out": [(getattr(b, mlp), "post") for b in blocks], "head": [(o_proj(b), "pre") for b in blocks]}
    for kind, grid in ours.items():
        value, terms = hf_attribution(ref, clean, corrupted, answer, wrong, sites[kind])
        if kind == "head":  # o_proj's input [pos, n_heads * d_head]: each head's slice summed over pos and d_head
            expected = torch.stack([t.view(t.shape[0], cfg.n_heads, cfg.d_head).sum(dim=(0, 2)) for t in terms])
        else:
            expected = torch.stack([t.sum(-1) for t in terms])
        assert grid.shape == expected.shape
        assert (grid - (value + expected)).abs().max().item() <= 1e-4, (family, kind)
        assert expected.abs().max() > 1e-3, kind  # terms 10x the tolerance: the comparison can fail
    assert all(p.grad is None for p in model.parameters())  # gradients of the activations only
    # the estimate is one of the exact sweep (a linear approximation of it): same corner, corrupted metric elsewhere
    exact = patching.get_act_patch_resid_pre(model, corrupted, clean_cache, metric)
    untouched = [p for p in range(clean.shape[1]) if p not in (1, 4)]
    corrupted_value = metric(model(corrupted)).item()
    assert (ours["resid_pre"][0, untouched] - corrupted_value).abs().max() <= 1e-4  # clean == corrupted there
    assert (exact[0, untouched] - corrupted_value).abs().max() <= 1e-4


@pytest.mark.parametrize("family", ["enc-dec", "t5", "moe", "bert"])
def test_attribution_is_the_derivative_along_the_patch_on_other_families(family):
    """Each cell's term is d metric / dt of the corrupted run with the activation moved t of the way to the clean
    one, at t = 0: checked by a central difference of whole-model runs (float32, step 1e-2)."""
    model, kw = random_model(family)
    clean, corrupted = torch.tensor([[5, 11, 2, 30, 8, 17]]), torch.tensor([[5, 11, 29, 30, 8, 3]])
    logits, clean_cache = model.run_with_cache(clean, **kw)
    answer, wrong = logits[0, -1].topk(2).indices.tolist()
    metric = patching.logit_diff_metric(answer, wrong)
    base = metric(model(corrupted, **kw)).item()
    step = 1e-2
    sweeps = [(patching.get_attr_patch_resid_pre, "hook_resid_pre", lambda i: (slice(None), i)),
              (patching.get_attr_patch_attn_out, "hook_attn_out", lambda i: (slice(None), i)),
              (patching.get_attr_patch_mlp_out, "hook_mlp_out", lambda i: (slice(None), i)),
              (patching.get_attr_patch_attn_head_out_all_pos, "attn.hook_z", lambda i: (slice(None), slice(None), i))]
    for fn, hook, sel_of in sweeps:
        grid = fn(model, corrupted, clean_cache, metric, **kw)
        for layer, index in [(0, 2), (1, 1), (2, 2)]:  # a corrupted position and an intact one (a head each)
            name, sel = f"blocks.{layer}.{hook}", sel_of(index)

            def moved(t):
                def shift(x, hook):
                    x = x.clone()
                    x[sel] = x[sel] + t * (clean_cache[name][sel] - x[sel])
                    return x
                with torch.no_grad():
                    return metric(model.run_with_hooks(corrupted, [(name, shift)], **kw)).item()
            slope = (moved(step) - moved(-step)) / (2 * step)
            assert abs(grid[layer, index].item() - (base + slope)) <= 2e-3 * max(1.0, abs(slope)), (hook, layer, index)
        assert (grid - base).abs().max() > 1e-2, hook  # terms that matter


def test_attribution_patching_refuses_a_metric_without_gradient():
    model, _ = random_model("gpt2")
    tokens = torch.tensor([[1, 2, 3]])
    _, cache = model.run_with_cache(tokens)
    with pytest.raises(ValueError, match="differentiable scalar"):
        patching.get_attr_patch_resid_pre(model, tokens, cache, lambda logits: float(logits[0, -1, 0].detach()))
    with pytest.raises(ValueError, match="same length"):
        patching.get_attr_patch_mlp_out(model, tokens[:, :2], cache, patching.prob_metric(3))


# ---- progress and cancel -----------------------------------------------------------------------------------------

class Cancelled(Exception):
    pass


def test_progress_reports_every_pass_and_cancel_removes_the_hooks(monkeypatch):
    model, _ = random_model("gpt2")
    clean, corrupted = torch.tensor([[5, 11, 2, 30, 8, 17]]), torch.tensor([[5, 11, 29, 30, 8, 3]])
    _, clean_cache = model.run_with_cache(clean)
    metric = patching.logit_diff_metric(3, 4)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    monkeypatch.setattr(batching, "copies_per_pass", lambda model, n_pos: 4)  # a layer's 6 positions take 2 passes
    rows = []
    for reuse in (True, False):
        calls, rows[:] = [], []
        with model.hooks([("hook_logits", lambda x, hook: rows.append(x.shape[0]))]):
            patching.get_act_patch_resid_pre(model, corrupted, clean_cache, metric, progress=lambda *a: calls.append(a),
                                             reuse_prefix=reuse)
        passes = rows[1:] if reuse else rows  # the prefix run first, then the cells' passes
        assert passes == ([4, 2] * n_layers if reuse else [4, 4, 4, 4, 2])  # per layer / in order, 4 a pass at most
        assert calls == [(sum(passes[:i + 1]), n_layers * 6) for i in range(len(passes))]
    calls = []
    ablation.head_ablation_effects(model, clean, 3, progress=lambda *a: calls.append(a))
    assert calls[-1] == (n_layers * n_heads, n_layers * n_heads) and len(calls) >= n_layers
    calls = []
    patching.get_attr_patch_attn_head_out_all_pos(model, corrupted, clean_cache, metric, progress=lambda *a: calls.append(a))
    assert calls == [(n_layers * n_heads, n_layers * n_heads)]  # every cell at once

    def cancel(done, total):
        calls.append(done)
        raise Cancelled
    for sweep in (lambda: patching.get_act_patch_attn_head_out_all_pos(model, corrupted, clean_cache, metric,
                                                                       progress=cancel),
                  lambda: ablation.head_ablation_effects(model, clean, 3, base=[(0, 1)], progress=cancel, reuse_prefix=False)):
        calls = []
        with pytest.raises(Cancelled):
            sweep()
        assert len(calls) == 1 and not any(h.active for h in model.hook_dict.values())
    torch.testing.assert_close(model.run_with_hooks(clean), model(clean))  # the model runs as before


# ---- cost in forward-equivalents ---------------------------------------------------------------------------------

class FlopCount(TorchDispatchMode):
    """Every operator PyTorch runs, counted with PyTorch's own FLOP formulas (``torch.utils.flop_counter``: matrix
    products, 2 per multiply-add), forward and backward. (``FlopCounterMode`` itself tracks modules through autograd
    hooks, which fail under ``no_grad``.)"""

    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        count = flop_registry.get(func._overloadpacket)
        if count is not None:
            self.total += count(*args, **kwargs, out_val=out)
        return out


def counted_flops(fn) -> int:
    """Matrix-multiply FLOPs that PyTorch counts while ``fn`` runs."""
    with FlopCount() as counter:
        fn()
    return counter.total


@pytest.mark.parametrize("family", ["gpt2", "enc-dec", "moe"])
def test_sweep_cost_is_the_work_pytorch_counts(family):
    model, kw = random_model(family)
    clean, corrupted = torch.tensor([[5, 11, 2, 30, 8]]), torch.tensor([[5, 11, 29, 30, 8]])
    src = kw.get("src_tokens")
    n_src = None if src is None else src.shape[1]
    _, clean_cache = model.run_with_cache(clean, **kw)
    metric = patching.logit_diff_metric(3, 4)
    one = counted_flops(lambda: model(corrupted, **kw))
    parts = batching.forward_flops(model, 5, n_src)
    assert abs(parts["encoder"] + sum(parts["blocks"]) + parts["decode"] - one) <= 1e-6 * one
    sweeps = {"resid_pre": patching.get_act_patch_resid_pre, "attn_out": patching.get_act_patch_attn_out,
              "mlp_out": patching.get_act_patch_mlp_out, "head": patching.get_act_patch_attn_head_out_all_pos}
    attr = {"resid_pre": patching.get_attr_patch_resid_pre, "attn_out": patching.get_attr_patch_attn_out,
            "mlp_out": patching.get_attr_patch_mlp_out, "head": patching.get_attr_patch_attn_head_out_all_pos}
    for kind, fn in sweeps.items():
        for reuse in (True, False):
            work = counted_flops(lambda: fn(model, corrupted, clean_cache, metric, reuse_prefix=reuse, **kw)) / one
            expected = batching.sweep_cost(model, 5, kind, "exact", reuse, n_src, logit_rows=1)  # the metric reads one
            assert work == pytest.approx(expected, rel=1e-6), kind
    for reuse in (True, False):
        work = counted_flops(lambda: ablation.head_ablation_effects(model, clean, 3, reuse_prefix=reuse, **kw)) / one
        assert work == pytest.approx(batching.sweep_cost(model, 5, "ablation", "exact", reuse, n_src, logit_rows=1),
                                     rel=1e-6)
    for kind, fn in attr.items():
        work = counted_flops(lambda: fn(model, corrupted, clean_cache, metric, **kw)) / one
        assert work == pytest.approx(batching.sweep_cost(model, 5, kind, "attribution", n_src=n_src), rel=1e-6), kind
        assert 1.2 < work < 2.5  # one forward, one backward of at most about its work (no weight gradients, no encoder)
    # prefix reuse: a cell at layer l runs n_layers - l of the n_layers blocks (here 2/3 of the blocks on average)
    assert batching.sweep_cost(model, 5, "resid_pre") < 0.8 * batching.sweep_cost(model, 5, "resid_pre", reuse_prefix=False)
    with pytest.raises(ValueError, match="unknown sweep"):
        batching.sweep_cost(model, 5, "neurons")
    with pytest.raises(ValueError, match="not head ablation"):
        batching.sweep_cost(model, 5, "ablation", "attribution")
    with pytest.raises(ValueError, match="unknown method"):
        batching.sweep_cost(model, 5, "head", "guess")


def test_a_metric_that_reads_one_position_decodes_that_row_only():
    """logit_diff_metric and prob_metric declare the one position they read (batching.reads_logits_at): the prefix
    sweeps decode that row only (forward_from's logit_positions, the other rows NaN), with the results of a metric
    that reads the whole logits (the same function, undeclared)."""
    model, kw = random_model("llama")
    clean, corrupted = torch.tensor([[5, 11, 2, 30, 8, 7]]), torch.tensor([[5, 11, 29, 30, 8, 7]])
    _, clean_cache = model.run_with_cache(clean, **kw)
    for declared in (patching.logit_diff_metric(3, 4, pos=-2), patching.prob_metric(3, pos=2)):
        assert len(declared.logit_positions) == 1
        undeclared = lambda logits, fn=declared: fn(logits)  # noqa: E731  (no logit_positions attribute)
        for fn in (patching.get_act_patch_resid_pre, patching.get_act_patch_attn_head_out_all_pos):
            torch.testing.assert_close(fn(model, corrupted, clean_cache, declared, **kw),
                                       fn(model, corrupted, clean_cache, undeclared, **kw), atol=1e-5, rtol=0)
    resid = model.run_with_cache(corrupted, names_filter="blocks.1.hook_resid_pre", **kw)[1]["blocks.1.hook_resid_pre"]
    full = model.forward_from(resid, 1, **kw)
    part = model.forward_from(resid, 1, logit_positions=[-2, 0], **kw)
    torch.testing.assert_close(part[:, [0, -2]], full[:, [0, -2]], atol=1e-5, rtol=0)
    assert torch.isnan(part[:, [1, 2, 3, 5]]).all()
