"""The local replacement model of an attribution graph: transcoders in place of the MLPs, everything else frozen.

Semantics of circuit-tracer (``circuit_tracer/replacement_model/replacement_model_transformerlens.py``,
``_configure_gradient_flow`` and ``setup_attribution``), after Ameisen et al. 2025, "Circuit Tracing", section
"Building an interpretable replacement model":

- per-layer transcoders read ``blocks.{l}.ln2.hook_normalized`` and write ``blocks.{l}.hook_mlp_out``;
- on one prompt, the attention patterns, every norm's scale (``hook_scale``: LayerNorm and RMSNorm, input, output and
  final norms) and every MLP output are frozen at their clean values; what the transcoder does not reconstruct of an
  MLP output is that layer's **error** vector ``mlp_out - (f W_dec + b_dec)``;
- under these freezes the residual stream is a linear function of the sources written into it: each token's
  embedding (``hook_embed``), each active feature's ``activation * W_dec[feature]`` and each error vector, written at
  ``hook_mlp_out`` of their layer; the rest (positional embeddings, biases, ``b_dec``) is constant.

:class:`FrozenRun` runs that linear model with a batch of identical copies so that one backward pass gives as many
rows of the adjacency as there are copies (circuit-tracer's ``AttributionContext.compute_batch``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from viz_model.features.dictionary import TRANSCODER_IN, SparseDictionary, transcoder_out_hook
from viz_model.features.saelens import load_dictionary
from viz_model.limits import env_mb

GRAPH_BUDGET_ENV = "VIZ_GRAPH_MB"
DEFAULT_GRAPH_MB = 1024


def graph_budget_bytes() -> int:
    """Bytes the adjacency matrix (and the rows being computed) may take: ``VIZ_GRAPH_MB`` megabytes (default 1,024,
    also for an unreadable, infinite, NaN, zero or negative value). A graph that would need more keeps fewer feature nodes (``max_feature_nodes``) and says so."""
    return env_mb(GRAPH_BUDGET_ENV, DEFAULT_GRAPH_MB)


class CircuitError(ValueError):
    """A model, transcoder set or request that attribution cannot work with; one line saying why."""


def load_transcoders(folder: str | Path, dtype: torch.dtype = torch.float32) -> dict[int, SparseDictionary]:
    """``{layer: transcoder}`` from a folder holding one SAELens-layout folder per layer named
    ``blocks.{l}.ln2.hook_normalized`` (the layout of ``assets/dictionaries/<model>/``; other dictionaries beside
    them, such as residual-stream SAEs, are ignored).

    Raises:
        CircuitError: no transcoder folder. DictionaryError: a folder that cannot be loaded (see
            :func:`viz_model.features.load_dictionary`).
    """
    base = Path(folder)
    found = {}
    if base.is_dir():
        for sub in base.iterdir():
            m = TRANSCODER_IN.match(sub.name)
            if m and (sub / "cfg.json").is_file():
                found[int(m.group(1))] = sub
    if not found:
        raise CircuitError(f"no transcoders (folders blocks.<layer>.ln2.hook_normalized) in {base.name!r}")
    return {layer: load_dictionary(found[layer], dtype) for layer in sorted(found)}


def check_model(model) -> None:
    """Refuse a model the replacement model cannot be built for, with one line.

    Attribution graphs need a decoder-only model with a language-model head whose blocks read their MLP input
    through a norm (pre-LN or sandwich: ``blocks.{l}.ln2.hook_normalized`` is the MLP's input).

    Raises:
        CircuitError: an encoder-decoder, no LM head, post-LN or output-norm blocks.
    """
    cfg = model.cfg
    if cfg.is_encoder_decoder:
        raise CircuitError("attribution graphs need a decoder-only model; this one is an encoder-decoder")
    if not model.has_lm_head or cfg.lm_head != "unembed" or not cfg.causal:
        raise CircuitError("attribution graphs need a causal language model that predicts the next token")
    if not cfg.input_norm:
        raise CircuitError(f"attribution graphs need blocks whose MLP reads a normed copy of the stream (pre-LN or "
                           f"sandwich); this model's blocks are {cfg.norm_placement}-norm")


def check_transcoders(model, transcoders: Mapping[int, SparseDictionary] | Iterable[SparseDictionary] | str | Path
                      ) -> dict[int, SparseDictionary]:
    """``{layer: transcoder}``, one per block of ``model``, each reading ``blocks.{l}.ln2.hook_normalized`` and
    writing ``blocks.{l}.hook_mlp_out`` with the model's ``d_model``.

    Args:
        transcoders: a mapping ``layer -> SparseDictionary``, the dictionaries themselves (their hook names give the
            layers), or a folder for :func:`load_transcoders`.

    Raises:
        CircuitError: a missing layer, a dictionary on another hook, widths that do not match the model.
    """
    if isinstance(transcoders, (str, Path)):
        transcoders = load_transcoders(transcoders)
    if not isinstance(transcoders, Mapping):
        items = {}
        for d in transcoders:
            m = TRANSCODER_IN.match(getattr(d, "hook_name", ""))
            if not m:
                raise CircuitError(f"a transcoder reads blocks.<layer>.ln2.hook_normalized, not {d.hook_name!r}")
            items[int(m.group(1))] = d
        transcoders = items
    n_layers, d_model = model.cfg.n_layers, model.cfg.d_model
    missing = [layer for layer in range(n_layers) if layer not in transcoders]
    if missing:
        raise CircuitError(f"attribution needs one transcoder per layer; missing for layer(s) "
                           f"{', '.join(map(str, missing[:8]))}{' ...' if len(missing) > 8 else ''}")
    out = {}
    for layer in range(n_layers):
        d = transcoders[layer]
        want_in = f"blocks.{layer}.ln2.hook_normalized"
        want_out = transcoder_out_hook(want_in)
        if not isinstance(d, SparseDictionary) or d.hook_name != want_in or d.hook_name_out != want_out:
            raise CircuitError(f"layer {layer}'s transcoder must read {want_in} and write {want_out}")
        if d.d_in != d_model or d.d_out != d_model:
            raise CircuitError(f"layer {layer}'s transcoder has d_in {d.d_in} and d_out {d.d_out}; "
                               f"the model's d_model is {d_model}")
        out[layer] = d
    return out


def final_read_hook(model) -> str:
    """The hook whose output the unembedding reads: ``ln_final.hook_normalized``, or the last block's
    ``hook_resid_post`` for a model without a final norm."""
    return "ln_final.hook_normalized" if model.ln_final is not None else f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"


@dataclass
class Prepared:
    """The clean run's values that attribution starts from (circuit-tracer's ``setup_attribution``).

    Attributes:
        tokens: ``[n_pos]`` int64 ids.
        logits: ``[d_vocab]`` float32 logits at the last position.
        mlp_out: ``[n_layers, n_pos, d_model]`` the clean MLP outputs (the frozen values).
        active_features: ``[n_active, 3]`` int64 ``(layer, pos, feature)`` sorted; activation_values ``[n_active]``.
        decoder_vecs: ``[n_active, d_model]`` ``activation * W_dec[feature]``, what each feature writes.
        encoder_vecs: ``[n_active, d_model]`` ``W_enc[:, feature]``, what each feature reads.
        errors: ``[n_layers, n_pos, d_model]`` ``mlp_out - reconstruction`` (0 at zeroed positions).
        token_vecs: ``[n_pos, d_model]`` the embeddings as they enter the stream (``hook_embed``).
        zeroed: positions whose features and errors are not sources.
    """
    tokens: torch.Tensor
    logits: torch.Tensor
    mlp_out: torch.Tensor
    active_features: torch.Tensor
    activation_values: torch.Tensor
    decoder_vecs: torch.Tensor
    encoder_vecs: torch.Tensor
    errors: torch.Tensor
    token_vecs: torch.Tensor
    zeroed: tuple[int, ...]


def as_ids(model, tokens) -> torch.Tensor:
    """``tokens`` (``[pos]`` or ``[1, pos]`` ids) as a 1-D int64 CPU tensor, checked.

    Raises:
        CircuitError: another shape, no token, more than ``n_ctx`` tokens, ids outside the vocabulary.
    """
    ids = torch.as_tensor(tokens)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1 or ids.is_floating_point():
        raise CircuitError(f"tokens must be [pos] or [1, pos] integer ids, got shape {tuple(ids.shape)}")
    ids = ids.to(device="cpu", dtype=torch.long)
    if len(ids) == 0:
        raise CircuitError("there is no token to attribute")
    if len(ids) > model.cfg.n_ctx:
        raise CircuitError(f"{len(ids)} tokens exceed the model's context of {model.cfg.n_ctx}")
    if ids.min() < 0 or ids.max() >= model.cfg.d_vocab:
        raise CircuitError(f"token ids must lie in [0, {model.cfg.d_vocab})")
    return ids


@torch.no_grad()
def prepare(model, tokens: torch.Tensor, transcoders: Mapping[int, SparseDictionary],
            zeroed: tuple[int, ...] = ()) -> Prepared:
    """One clean forward pass: the transcoders' activations and errors, the token vectors and the last logits."""
    n_layers = model.cfg.n_layers
    names = ["hook_embed"] + [f"blocks.{l}.ln2.hook_normalized" for l in range(n_layers)] \
        + [f"blocks.{l}.hook_mlp_out" for l in range(n_layers)]
    logits, cache = model.run_with_cache(tokens[None], names_filter=names, logit_positions=[len(tokens) - 1])
    feats, acts, dec, enc, errors, mlp_out = [], [], [], [], [], []
    keep = torch.ones(len(tokens), dtype=torch.bool)
    keep[list(zeroed)] = False
    for layer in range(n_layers):
        tc = transcoders[layer]
        x = cache[f"blocks.{layer}.ln2.hook_normalized"][0].float()
        out = cache[f"blocks.{layer}.hook_mlp_out"][0].float().cpu()
        f = tc.encode(x).float().cpu()
        f[~keep] = 0
        err = out - tc.decode(f.to(tc.W_dec.device)).float().cpu()
        err[~keep] = 0
        pos, idx = f.nonzero(as_tuple=True)  # row-major: sorted by position, then feature
        feats.append(torch.stack([torch.full_like(pos, layer), pos, idx], 1))
        acts.append(f[pos, idx])
        W_dec, W_enc = tc.W_dec.detach().float().cpu(), tc.W_enc.detach().float().cpu()
        dec.append(f[pos, idx, None] * W_dec[idx])
        enc.append(W_enc[:, idx].T)
        errors.append(err)
        mlp_out.append(out)
    d_model = model.cfg.d_model
    return Prepared(tokens=tokens, logits=logits[0, -1].float().cpu(), mlp_out=torch.stack(mlp_out),
                    active_features=torch.cat(feats) if feats else torch.zeros(0, 3, dtype=torch.long),
                    activation_values=torch.cat(acts), decoder_vecs=torch.cat(dec).reshape(-1, d_model),
                    encoder_vecs=torch.cat(enc).reshape(-1, d_model), errors=torch.stack(errors),
                    token_vecs=cache["hook_embed"][0].float().cpu(), zeroed=tuple(zeroed))


def frozen_copies(model, n_pos: int, budget_bytes: int) -> int:
    """How many copies of an ``n_pos``-token prompt one :class:`FrozenRun` may hold within ``budget_bytes``: what one
    copy keeps for its backward passes, per layer and position about ``12 d_model + 3 d_mlp`` numbers (the stream,
    norms, q/k/v, z, the MLP's activations) and a row of every head's pattern, in the model's dtype. At least 1."""
    cfg = model.cfg
    mlp = cfg.d_mlp * (max(1, cfg.experts_per_token) if cfg.n_experts else 1) + (cfg.d_shared_mlp or 0)
    per_copy = n_pos * cfg.n_layers * (12 * cfg.d_model + 3 * mlp + cfg.n_heads * n_pos) * model.embed.W_E.element_size()
    return max(1, int(budget_bytes // max(1, per_copy)))


class FrozenRun:
    """The replacement model's forward pass over the prompt, kept for backward passes that each fill many rows.

    Hooks: every ``hook_scale`` and ``hook_pattern`` is detached (frozen), each ``blocks.{l}.hook_mlp_out`` is replaced
    by its clean value as a leaf that requires grad (a source's write location), ``hook_embed`` likewise; the inputs of
    the transcoders (``blocks.{l}.ln2.hook_normalized``) and of the unembedding (:func:`final_read_hook`) are kept as
    the places where targets read.

    Without ``cut``, the pass runs once (batch 1) and :meth:`grads` computes a batch of rows in one backward pass with
    PyTorch's batched gradients (``torch.autograd.grad(..., is_grads_batched=True)``: the backward pass vectorised
    over the rows' seeds), so the forward pass costs one copy however many rows a backward pass fills. With ``cut``
    (``{copy: (layer, head)}``: in that copy, head ``head`` of ``layer`` passes no change, its ``hook_z`` detached), the
    pass runs on ``batch`` identical copies, one row each (circuit-tracer's ``AttributionContext.compute_batch``).

    ``n_pos``: run only the prompt's first ``n_pos`` positions (a causal model's targets at those positions read
    nothing later, and their rows are the same; a backward pass over fewer positions costs less).
    """

    def __init__(self, model, prep: Prepared, batch: int = 1, cut: Mapping[int, tuple[int, int]] | None = None,
                 n_pos: int | None = None) -> None:
        self.model = model
        n_pos = len(prep.tokens) if n_pos is None else n_pos  # a prefix: a causal model's first n_pos positions
        self.batched = not cut
        self.batch = 1 if self.batched else batch
        n_layers = model.cfg.n_layers
        dtype, device = model.dtype, model.device
        self.reads: dict[int, torch.Tensor] = {}
        leaves: dict[int, torch.Tensor] = {}
        final = final_read_hook(model)

        def detach(x, hook):
            return x.detach()

        def leaf(value: torch.Tensor, slot: int):
            def fn(x, hook):
                t = value.to(device=x.device, dtype=x.dtype).expand_as(x).clone().requires_grad_(True)
                leaves[slot] = t
                return t
            return fn

        def read(slot: int):
            def fn(x, hook):
                self.reads[slot] = x
            return fn

        pairs = [(name, detach) for name in model.hook_dict
                 if name.endswith("hook_scale") or name.endswith("attn.hook_pattern")]
        pairs.append(("hook_embed", leaf(prep.token_vecs[:n_pos].to(dtype), -1)))
        for layer in range(n_layers):
            pairs.append((f"blocks.{layer}.hook_mlp_out", leaf(prep.mlp_out[layer, :n_pos].to(dtype), layer)))
            pairs.append((f"blocks.{layer}.ln2.hook_normalized", read(layer)))
        pairs.append((final, read(n_layers)))
        for index, (layer, head) in (cut or {}).items():
            pairs.append((f"blocks.{layer}.attn.hook_z", _cut_head(index, head)))
        ids = prep.tokens[:n_pos].to(device)[None].expand(self.batch, -1)
        with torch.enable_grad(), model.hooks(pairs):
            model(ids, logit_positions=[n_pos - 1])
        self.leaves = [leaves[-1]] + [leaves[layer] for layer in range(n_layers)]  # embed, mlp_out 0 .. n_layers-1

    def grads(self, read_layers: torch.Tensor, positions: torch.Tensor, vectors: torch.Tensor
              ) -> list[torch.Tensor | None]:
        """One backward pass: target ``i`` reads ``vectors[i]`` ``[d_model]`` at ``positions[i]`` of read
        ``read_layers[i]`` (``l`` < n_layers: transcoder l's input; n_layers: the unembedding's input); in the copies
        mode, target ``i`` uses copy ``i`` (at most ``batch`` targets). Returns the gradients at ``[embed, mlp_out 0,
        ..., mlp_out n_layers-1]``, each ``[n_targets, n_pos, d_model]`` float32, or None where no target can reach
        (layers at or above every target's)."""
        n = len(read_layers)
        outs, seeds = [], []
        for layer in read_layers.unique().tolist():
            rows = (read_layers == layer).nonzero().flatten()
            read = self.reads[int(layer)]
            if self.batched:  # one seed per row, over the batch-1 pass: [n, 1, n_pos, d_model]
                seed = read.new_zeros((n,) + tuple(read.shape))
                seed[rows, 0, positions[rows].to(read.device)] = vectors[rows].to(device=read.device, dtype=read.dtype)
            else:
                seed = torch.zeros_like(read)
                seed[rows, positions[rows].to(read.device)] = vectors[rows].to(device=read.device, dtype=read.dtype)
            outs.append(read)
            seeds.append(seed)
        top = int(read_layers.max())
        inputs = self.leaves[:top + 1]  # mlp_out of layer l is written after transcoder l reads
        got = torch.autograd.grad(outs, inputs, grad_outputs=seeds, retain_graph=True, allow_unused=True,
                                  is_grads_batched=self.batched)
        result: list[torch.Tensor | None] = [None] * len(self.leaves)
        for slot, g in enumerate(got):
            if g is not None:
                result[slot] = (g[:, 0] if self.batched else g[:n]).float().cpu()
        return result


def _cut_head(index: int, head: int):
    def fn(z, hook):
        z = z.clone()
        z[index, :, head] = z[index, :, head].detach()
        return z
    return fn
