"""The rest of the block: residual stream norms, LayerNorm statistics, feed-forward neurons, logit lens.

Every value is read from the trace's hooks or is an exact function of them and the model's weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from viz_model import VizTransformer
from viz_model.placement import weight

from viz_ui.analysis.text_trace import Trace


def residual_norms(trace: Trace, n_layers: int) -> tuple[np.ndarray, list[str]]:
    """L2 norm of the residual stream at every stage and position.

    Returns:
        ``([2 * n_layers + 1, pos] norms, stage names)``: stages are ``resid_pre 0``, then per layer
        ``resid_mid i`` (``resid_mid_cross i`` too in decoder blocks with cross-attention) and ``resid_post i``.
    """
    a, rows, names = trace.arrays, [], []
    rows.append(a["blocks.0.hook_resid_pre"])
    names.append("embed (resid_pre 0)")
    for i in range(n_layers):
        rows.append(a[f"blocks.{i}.hook_resid_mid"])
        names.append(f"L{i} after attention")
        if f"blocks.{i}.hook_resid_mid_cross" in a:  # decoder blocks of an encoder-decoder model
            rows.append(a[f"blocks.{i}.hook_resid_mid_cross"])
            names.append(f"L{i} after cross-attention")
        rows.append(a[f"blocks.{i}.hook_resid_post"])
        names.append(f"L{i} after MLP")
    return np.stack([np.linalg.norm(r, axis=-1) for r in rows]), names


def sublayer_norms(trace: Trace, n_layers: int) -> tuple[np.ndarray, list[str]]:
    """L2 norm of what each sub-layer writes (``hook_attn_out``, ``hook_cross_attn_out`` where present,
    ``hook_mlp_out``): ``[n_sublayers, pos]``."""
    a, rows, names = trace.arrays, [], []
    for i in range(n_layers):
        rows.append(a[f"blocks.{i}.hook_attn_out"])
        names.append(f"L{i} attention")
        if f"blocks.{i}.hook_cross_attn_out" in a:
            rows.append(a[f"blocks.{i}.hook_cross_attn_out"])
            names.append(f"L{i} cross-attention")
        rows.append(a[f"blocks.{i}.hook_mlp_out"])
        names.append(f"L{i} MLP")
    return np.stack([np.linalg.norm(r, axis=-1) for r in rows]), names


@dataclass
class NormStats:
    """A LayerNorm's input and output for one token, with mean and variance over d_model."""

    name: str
    before: np.ndarray  # [d_model]
    after: np.ndarray  # [d_model]
    before_name: str = "input"  # what the norm reads, e.g. "resid_pre" (pre-LN ln1) or "resid_pre + attn_out" (post-LN)
    after_name: str = "output"  # where its output goes, e.g. "read by attention" (pre-LN ln1) or "resid_mid" (post-LN)
    role: str = ""  # e.g. "the norm before attention" / "the norm after the attention add"

    @property
    def summary(self) -> dict[str, float]:
        return {"mean before": float(self.before.mean()), "variance before": float(self.before.var()),
                "mean after": float(self.after.mean()), "variance after": float(self.after.var())}


def _output_norm_stats(trace: Trace, model: VizTransformer, layer: int, pos: int) -> list[NormStats]:
    """``ln1_post`` and ``ln2_post`` (OLMo 2's only norms): their inputs, the sub-layers' raw outputs, are no hook's
    value but exact functions of recorded ones, ``concat(z) W_O + b_O`` and ``hook_post W_out + b_out``."""
    a, p, block = trace.arrays, f"blocks.{layer}.", model.blocks[layer]
    with torch.no_grad():
        attn, mlp = block.attn, block.mlp
        z = torch.tensor(a[p + "attn.hook_z"][pos]).reshape(-1)
        raw_attn = z @ weight(attn, "W_O").detach().float().cpu().reshape(-1, model.cfg.d_model)
        raw_attn = raw_attn if attn.b_O is None else raw_attn + weight(attn, "b_O").detach().float().cpu()
        raw_mlp = torch.tensor(a[p + "mlp.hook_post"][pos]) @ weight(mlp, "W_out").detach().float().cpu()
        raw_mlp = raw_mlp if mlp.b_out is None else raw_mlp + weight(mlp, "b_out").detach().float().cpu()
    return [NormStats("ln1_post", raw_attn.numpy(), a[p + "ln1_post.hook_normalized"][pos], "attention's output",
                      "attn_out (added to the stream)", "the norm on the attention's output"),
            NormStats("ln2_post", raw_mlp.numpy(), a[p + "ln2_post.hook_normalized"][pos], "the MLP's output",
                      "mlp_out (added to the stream)", "the norm on the feed-forward output")]


def layernorm_stats(trace: Trace, layer: int, pos: int, placement: str,
                    model: VizTransformer | None = None) -> list[NormStats]:
    """Input and output of ``ln1`` and ``ln2`` of one block at one position.

    Pre-LN (and sandwich norms, whose ln1 and ln2 sit where pre-LN's do): ln1 normalises ``resid_pre`` and ln2
    ``resid_mid`` (the sub-layers read the normed copy, the stream itself is not normed); a parallel residual
    (GPT-NeoX) feeds ln2 from ``resid_pre`` too. Post-LN: ln1 normalises ``resid_pre + attn_out`` (its output is
    ``resid_mid``) and ln2 normalises ``resid_mid + mlp_out`` (its output is ``resid_post``). In decoder
    blocks with cross-attention, ``resid_mid_cross`` takes the place of ``resid_mid`` for ln2. Output norms
    (OLMo 2, ``placement == "output"``, ``model`` needed): ``ln1_post`` and ``ln2_post`` on the sub-layers' outputs.
    """
    if placement == "output":
        return _output_norm_stats(trace, model, layer, pos)
    placement = "pre" if placement == "sandwich" else placement
    parallel = model is not None and model.cfg.parallel_residual
    a, p = trace.arrays, f"blocks.{layer}."
    # a decoder block with cross-attention feeds ln2 (and the MLP) from the stream after cross-attention
    before_mlp = a[p + "hook_resid_pre"] if parallel else a.get(p + "hook_resid_mid_cross", a[p + "hook_resid_mid"])
    if placement == "pre":
        inputs = (a[p + "hook_resid_pre"][pos], before_mlp[pos])
    else:
        inputs = (a[p + "hook_resid_pre"][pos] + a[p + "hook_attn_out"][pos], before_mlp[pos] + a[p + "hook_mlp_out"][pos])
    outputs = [a[p + f"ln{i + 1}.hook_normalized"][pos] for i in range(2)]
    mid = "resid_pre" if parallel else "resid_mid_cross" if p + "hook_resid_mid_cross" in a else "resid_mid"
    if placement == "pre":
        names = (("resid_pre", "read by attention", "the norm before attention"),
                 (mid, "read by the MLP", "the norm before the feed-forward network"))
    else:
        names = (("resid_pre + attn_out", "resid_mid", "the norm after the attention add"),
                 (f"{mid} + mlp_out", "resid_post", "the norm after the feed-forward add"))
    return [NormStats(f"ln{i + 1}", inputs[i], outputs[i], *names[i]) for i in range(2)]


def top_neurons(post: np.ndarray, k: int = 15) -> tuple[np.ndarray, np.ndarray]:
    """Indices and activations of the ``k`` most active hidden units in ``post`` ``[d_mlp]`` (largest first)."""
    order = np.argsort(-post, kind="stable")[:k]
    return order, post[order]


@torch.no_grad()
def logit_lens(model: VizTransformer, trace: Trace, progress=None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The logit lens (nostalgebraist, 2020): decode the residual stream after every layer with the
    model's own output head (final norm, BERT's masked-LM transform if any, unembedding), as if the model
    stopped there.

    Raises:
        ValueError: when the model has no language-model head.

    Returns:
        ``(top_ids [n_layers + 1, pos], top_probs [n_layers + 1, pos], row names)``; row 0 decodes the
        embeddings (resid_pre 0), row i + 1 the output of layer i; the last row equals the model's output.

    ``progress(stages done, n_layers + 1)``, when given, is called after each stage is decoded (one at a time).
    """
    a, cfg = trace.arrays, model.cfg
    stages = [a["blocks.0.hook_resid_pre"]] + [a[f"blocks.{i}.hook_resid_post"] for i in range(cfg.n_layers)]
    ids, values = [], []
    for i, stage in enumerate(stages):  # final norm (and BERT's MLM transform), W_U, b_U
        top = torch.softmax(model.decode(torch.from_numpy(np.asarray(stage))).float(), dim=-1).cpu().max(dim=-1)
        ids.append(top.indices.numpy())
        values.append(top.values.numpy())
        if progress is not None:
            progress(i + 1, len(stages))
    return np.stack(ids), np.stack(values), ["embeddings"] + [f"after L{i}" for i in range(cfg.n_layers)]
