"""Cause and effect on the running model, as numpy and DataFrames for the interventions page (no Streamlit):
head ablation with its output diff, logit lens and greedy generation; activation patching between a clean and a
corrupted text; direct logit attribution. Every number comes from :mod:`viz_model.interventions`
(``ablation``, ``patching``, ``attribution``) and ``run_with_hooks``.

Encoder-decoder models: the runs are the decoder's, over the tokens the app shows (the start token and the greedy
output of the clean source, see :func:`viz_ui.analysis.text_trace.run_trace`), with the source as ``src_tokens``; ablated heads
are decoder self-attention heads.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from viz_model import VizTransformer, ablation, attribution, generate, patching
from viz_model.interventions.batching import copies_per_pass

from viz_ui.analysis.text_trace import Trace, encode_text, token_limit

Head = tuple[int, int]
SITES = {"resid_pre": "residual stream entering the layer (resid_pre)", "attn_out": "attention output (attn_out)",
         "mlp_out": "MLP output (mlp_out)", "head": "each head's output at every position (hook_z)"}
N_GENERATE = 8  # greedy tokens generated after the text, intact and ablated


@dataclass(frozen=True)
class Prompt:
    """What one run of the model reads: ``ids`` (the decoder's tokens for an encoder-decoder) and, for an
    encoder-decoder, the source ``src_ids``."""

    ids: tuple[int, ...]
    src_ids: tuple[int, ...] | None = None

    @property
    def tokens(self) -> torch.Tensor:
        """``[1, pos]`` int64."""
        return torch.tensor([self.ids])  # the model moves ids to its device

    @property
    def kwargs(self) -> dict:
        """``forward`` keyword arguments: ``{"src_tokens": [1, src_pos]}`` for an encoder-decoder, else none."""
        return {} if self.src_ids is None else {"src_tokens": torch.tensor([self.src_ids])}


def prompt_of(trace: Trace) -> Prompt:
    """The prompt of an app trace: the same ids the app ran (cut to the context, decoder output for seq2seq)."""
    src = None if trace.src_ids is None else tuple(int(i) for i in trace.src_ids)
    return Prompt(tuple(int(i) for i in trace.ids), src)


def corrupted_prompt(clean: Prompt, corrupted: Trace) -> Prompt:
    """The corrupted run: its own tokens; for an encoder-decoder the corrupted *source* with the clean decoder
    tokens (patching swaps decoder activations position by position, so both runs read the same output)."""
    if clean.src_ids is None:
        return prompt_of(corrupted)
    return Prompt(clean.ids, tuple(int(i) for i in corrupted.src_ids))


# ---- heads --------------------------------------------------------------------------------------------------

_HEAD = re.compile(r"L(\d+)H(\d+)")


def head_name(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def parse_heads(value: str, n_layers: int, n_heads: int) -> list[Head]:
    """``"L0H1,L2H3"`` (any separators) as sorted, unique ``(layer, head)`` pairs the model has."""
    heads = {(int(a), int(b)) for a, b in _HEAD.findall(str(value))}
    return sorted((a, b) for a, b in heads if a < n_layers and b < n_heads)


def heads_text(heads) -> str:
    """The link form of a head list: ``"L0H1,L2H3"``."""
    return ",".join(head_name(*h) for h in sorted(heads))


# ---- ablation -----------------------------------------------------------------------------------------------

@dataclass
class AblationView:
    """An ablation's effect at one position: logits ``[d_vocab]`` intact and ablated, the logit lens (top token
    and its probability after every layer, ``[n_layers + 1]``), and greedy generations (token ids)."""

    intact: np.ndarray
    ablated: np.ndarray
    lens_rows: list[str]
    lens_intact: tuple[np.ndarray, np.ndarray]
    lens_ablated: tuple[np.ndarray, np.ndarray]
    gen_intact: list[int] = field(default_factory=list)
    gen_ablated: list[int] = field(default_factory=list)


@torch.no_grad()
def ablation_means(model: VizTransformer, reference: Prompt) -> torch.Tensor:
    """``[n_layers, n_heads, d_head]``: every head's mean ``hook_z`` over the reference's positions."""
    return ablation.head_means(model, reference.tokens, **reference.kwargs)


def _lens(model: VizTransformer, prompt: Prompt, pos: int) -> tuple[np.ndarray, np.ndarray]:
    """The logit lens at ``pos`` under whatever hooks are active: top id and probability per stage."""
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{i}.hook_resid_post" for i in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(prompt.tokens, names_filter=names, **prompt.kwargs)
    resid = torch.stack([cache[name][0, pos] for name in names])  # [stage, d_model]
    top = torch.softmax(model.decode(resid).float(), dim=-1).cpu().max(dim=-1)
    return top.indices.numpy(), top.values.numpy()


def _greedy(model: VizTransformer, prompt: Prompt) -> list[int]:
    """Greedy tokens (KV cache, under whatever hooks are active): ``N_GENERATE`` after a decoder's text; the
    whole output of an encoder-decoder, from its start token."""
    if prompt.src_ids is not None:
        steps = generate(model, [model.cfg.decoder_start_id], model.cfg.n_ctx - 1, 0.0, src_ids=list(prompt.src_ids))
    else:
        steps = generate(model, list(prompt.ids), N_GENERATE, 0.0)
    return [s.token_id for s in steps]


@torch.no_grad()
def ablation_logits(model: VizTransformer, prompt: Prompt, heads: list[Head], kind: str, means: torch.Tensor | None,
                    pos: int) -> tuple[np.ndarray, np.ndarray]:
    """The logits ``[d_vocab]`` at position ``pos`` of the model intact and without ``heads`` (zero or mean ablation at
    ``hook_z``, :func:`viz_model.ablation.ablate_heads`): two forward passes, what the output charts need."""
    intact = model(prompt.tokens, **prompt.kwargs)[0, pos].float().cpu().numpy()
    ablated = ablation.ablate_heads(model, prompt.tokens, heads, kind, means, **prompt.kwargs)[0, pos].float().cpu().numpy()
    return intact, ablated


@torch.no_grad()
def ablation_view(model: VizTransformer, prompt: Prompt, heads: list[Head], kind: str, means: torch.Tensor | None,
                  pos: int, logits: tuple[np.ndarray, np.ndarray] | None = None) -> AblationView:
    """The model with and without ``heads`` (zero or mean ablation at ``hook_z``) at position ``pos``: the logits of
    :func:`ablation_logits` (or ``logits``, when they were computed already), the logit lens of each run and, for
    causal models only, the greedy generation of each."""
    intact, ablated = logits if logits is not None else ablation_logits(model, prompt, heads, kind, means, pos)
    rows = ["embeddings"] + [f"after L{i}" for i in range(model.cfg.n_layers)]
    lens_intact = _lens(model, prompt, pos)
    hooks = ablation.head_ablation_hooks(model, heads, kind, means)
    with model.hooks(hooks):
        lens_ablated = _lens(model, prompt, pos)
    view = AblationView(intact, ablated, rows, lens_intact, lens_ablated)
    if model.cfg.causal:
        view.gen_intact = _greedy(model, prompt)
        with model.hooks(hooks):
            view.gen_ablated = _greedy(model, prompt)
    return view


def softmax(logits: np.ndarray) -> np.ndarray:
    """``softmax`` of ``[d_vocab]`` logits in float64 (probabilities of an output distribution)."""
    z = logits.astype(np.float64) - logits.max()
    e = np.exp(z)
    return e / e.sum()


def prob_diff_table(intact: np.ndarray, ablated: np.ndarray, vocab: list[str], k: int = 8) -> pd.DataFrame:
    """The ``k`` most likely tokens of either run (intact first, then ablated ones not already listed): token, id,
    probability intact and ablated, and the change Δp = ablated − intact (probability, not percentage points)."""
    p0, p1 = softmax(intact), softmax(ablated)
    ids = list(np.argsort(-p0, kind="stable")[:k])
    ids += [i for i in np.argsort(-p1, kind="stable")[:k] if i not in ids]
    ids = np.array(ids)
    return pd.DataFrame({"token": [vocab[i] for i in ids], "id": ids, "p intact": p0[ids], "p ablated": p1[ids],
                         "Δp": p1[ids] - p0[ids]})


def biggest_changes(intact: np.ndarray, ablated: np.ndarray, vocab: list[str], k: int = 5,
                    floor: float = 1e-3) -> pd.DataFrame:
    """The ``k`` tokens whose probability rose most and the ``k`` that fell most (over the whole vocabulary),
    largest rise first: token, id, Δp. Changes smaller than ``floor`` (0.1 percentage point) are left out."""
    delta = softmax(ablated) - softmax(intact)
    order = np.argsort(-delta, kind="stable")
    ids = [i for i in order[:k] if delta[i] >= floor] + [i for i in order[::-1][:k][::-1] if delta[i] <= -floor]
    return pd.DataFrame({"token": [vocab[i] for i in ids], "id": np.array(ids, dtype=np.int64),
                         "Δp": delta[ids] if ids else np.zeros(0)})


def lens_table(view: AblationView, vocab: list[str]) -> pd.DataFrame:
    """The logit lens at the chosen position, intact vs ablated: one row per stage, the top token and its
    probability in each run, and whether the top token changed."""
    (i0, p0), (i1, p1) = view.lens_intact, view.lens_ablated
    return pd.DataFrame({"stage": view.lens_rows, "intact": [f"{vocab[i]}  ({p:.1%})" for i, p in zip(i0, p0)],
                         "ablated": [f"{vocab[i]}  ({p:.1%})" for i, p in zip(i1, p1)],
                         "changed": ["yes" if a != b else "" for a, b in zip(i0, i1)]})


def generation_table(view: AblationView, vocab: list[str]) -> pd.DataFrame:
    """Greedy tokens step by step, intact vs ablated, and where they part."""
    n = max(len(view.gen_intact), len(view.gen_ablated))
    pad = lambda ids: [vocab[i] for i in ids] + [""] * (n - len(ids))  # noqa: E731
    return pd.DataFrame({"step": np.arange(1, n + 1), "intact": pad(view.gen_intact), "ablated": pad(view.gen_ablated),
                         "same": ["yes" if i < min(len(view.gen_intact), len(view.gen_ablated)) and
                                  view.gen_intact[i] == view.gen_ablated[i] else "" for i in range(n)]})


def with_progress(fn, progress) -> dict:
    """``{"progress": progress}`` when ``fn`` takes a ``progress`` callback and one is given, else ``{}``."""
    return {"progress": progress} if progress is not None and "progress" in inspect.signature(fn).parameters else {}


@torch.no_grad()
def head_effects(model: VizTransformer, prompt: Prompt, token_id: int, pos: int, kind: str, means: torch.Tensor | None,
                 base: list[Head], progress=None) -> np.ndarray:
    """:func:`viz_model.ablation.head_ablation_effects` as numpy ``[n_layers, n_heads]`` (Δ log p in nats);
    ``progress(done, total)`` after each batched pass."""
    fn = ablation.head_ablation_effects
    return fn(model, prompt.tokens, token_id, pos, kind, means, base=base, **with_progress(fn, progress),
              **prompt.kwargs).cpu().numpy()


# ---- activation patching ------------------------------------------------------------------------------------

def metric_for(kind: str, answer: int, wrong: int, pos: int):
    """``logit_diff`` (answer − wrong) or ``prob`` (the answer's probability) at ``pos``, as a patching metric."""
    if kind == "prob":
        return patching.prob_metric(answer, pos)
    return patching.logit_diff_metric(answer, wrong, pos)


SWEEPS = {"resid_pre": patching.get_act_patch_resid_pre, "attn_out": patching.get_act_patch_attn_out,
          "mlp_out": patching.get_act_patch_mlp_out, "head": patching.get_act_patch_attn_head_out_all_pos}
# attribution patching (Nanda, 2023): the same maps from one forward and backward pass, a first-order estimate
ATTR_SWEEPS = {site: getattr(patching, name, None) for site, name in (
    ("resid_pre", "get_attr_patch_resid_pre"), ("attn_out", "get_attr_patch_attn_out"),
    ("mlp_out", "get_attr_patch_mlp_out"), ("head", "get_attr_patch_attn_head_out_all_pos"))}
METHODS = ("exact", "attribution")


def _clean_cache(model: VizTransformer, clean: Prompt):
    wanted = lambda n: not n.startswith("encoder") and n.endswith(  # noqa: E731
        ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "attn.hook_z")) and ".cross_attn." not in n
    return model.run_with_cache(clean.tokens, names_filter=wanted, **clean.kwargs)


@torch.no_grad()
def patching_values(model: VizTransformer, clean: Prompt, corrupted: Prompt, kind: str, answer: int, wrong: int,
                    pos: int) -> tuple[float, float]:
    """The metric (see :func:`metric_for`) of the clean run and of the corrupted run."""
    metric = metric_for(kind, answer, wrong, pos)
    return (float(metric(model(clean.tokens, **clean.kwargs))),
            float(metric(model(corrupted.tokens, **corrupted.kwargs))))


def attribution_available() -> bool:
    """Whether this build of :mod:`viz_model.patching` has attribution patching."""
    return all(ATTR_SWEEPS.values())


def patching_sweep(model: VizTransformer, clean: Prompt, corrupted: Prompt, kind: str, answer: int, wrong: int,
                   pos: int, site: str, method: str = "exact", progress=None) -> np.ndarray:
    """One sweep for the metric: the corrupted run's metric with each activation taken from the clean run,
    ``[n_layers, pos]`` (``head``: ``[n_layers, n_heads]``), not normalised. ``method``: ``"exact"`` runs one
    patched copy per cell (:data:`SWEEPS`); ``"attribution"`` estimates every cell to first order from one
    backward pass (:data:`ATTR_SWEEPS`). ``progress(done, total)``: the sweep's own progress.

    Raises:
        ValueError: prompts of different lengths (from :mod:`viz_model.patching`); attribution patching asked of a
            build without it.
    """
    fn = (SWEEPS if method == "exact" else ATTR_SWEEPS)[site]
    if fn is None:
        raise ValueError("attribution patching is not available in this version")
    with torch.no_grad():
        _, cache = _clean_cache(model, clean)
    if method == "exact":
        with torch.no_grad():
            out = fn(model, corrupted.tokens, cache, metric_for(kind, answer, wrong, pos), **with_progress(fn, progress),
                     **corrupted.kwargs)
    else:  # gradients: no torch.no_grad here
        out = fn(model, corrupted.tokens, cache, metric_for(kind, answer, wrong, pos), **with_progress(fn, progress),
                 **corrupted.kwargs)
    return out.detach().float().cpu().numpy()


def normalised(raw: np.ndarray, clean_value: float, corrupted_value: float) -> np.ndarray | None:
    """:func:`viz_model.patching.normalise` (1 = fully restored, 0 = no effect); None when both runs give the same
    metric (nothing to restore)."""
    try:
        return patching.normalise(torch.from_numpy(raw), clean_value, corrupted_value).numpy()
    except ValueError:
        return None


@torch.no_grad()
def patch_lens(model: VizTransformer, clean: Prompt, corrupted: Prompt, site: str, layer: int,
               index: int) -> dict[str, float]:
    """:func:`viz_model.patching.patch_downstream` for one cell: ``{component: ‖Δ output‖}``."""
    _, cache = _clean_cache(model, clean)
    return patching.patch_downstream(model, corrupted.tokens, cache, site, layer, index, **corrupted.kwargs)


def token_pairs(clean: list[str], corrupted: list[str]) -> pd.DataFrame:
    """The two token lists side by side, one row per position (blank past the shorter one), with the positions
    where they differ marked."""
    n = max(len(clean), len(corrupted))
    a = clean + [""] * (n - len(clean))
    b = corrupted + [""] * (n - len(corrupted))
    return pd.DataFrame({"position": np.arange(n), "clean": a, "corrupted": b,
                         "differs": ["◆ differs" if x != y else "" for x, y in zip(a, b)]})


# A word swapped for another of its kind: the default corrupted text changes one of these.
_PAIRS = ["girl boy", "she he", "her his", "mom dad", "mommy daddy", "sister brother", "cat dog", "big small",
          "happy sad", "red blue", "Lily Tom", "Sue Ben", "Mia Max", "Anna Sam", "Lucy Tim", "Sara Jack",
          "sun moon", "day night", "hot cold", "up down", "yes no", "good bad",
          "January February", "March April", "May June", "July August", "September October", "November December",
          "Monday Tuesday", "Wednesday Thursday", "Friday Saturday"]
SWAPS = {a: b for pair in _PAIRS for a, b in (pair.split(), pair.split()[::-1])}
_WORD = re.compile(r"[A-Za-z]+|\d")


def _swap(word: str) -> str | None:
    if word.isdigit():
        return str((int(word) + 1) % 10)
    low = word.lower()
    for key in (word, low):
        if key in SWAPS:
            other = SWAPS[key]
            return other[0].upper() + other[1:] if word[0].isupper() else other
    return None


def corruption_candidates(text: str, limit: int = 48) -> list[str]:
    """Texts that differ from ``text`` in one word swapped for another of its kind (she → he, Lily → Tom,
    March → April, a digit + 1), at most ``limit``, from the end of the text backwards."""
    out = []
    for match in reversed(list(_WORD.finditer(text))):
        other = _swap(match.group())
        if other:
            out.append(text[:match.start()] + other + text[match.end():])
            if len(out) >= limit:
                break
    return out


def text_ids(model: VizTransformer, tokenizer, text: str) -> list[int]:
    """The ids the app runs for ``text`` (the source, for an encoder-decoder): the tokenizer's, cut to the
    trace's token limit (see :func:`viz_ui.analysis.text_trace.run_trace`)."""
    return list(encode_text(tokenizer, text).ids[:token_limit(model.cfg)[0]])


def fitting_corruptions(model: VizTransformer, tokenizer, clean: Prompt, text: str) -> tuple[list[str], list[list[int]]]:
    """Of :func:`corruption_candidates`, those with as many tokens as the clean text and other ids (no run of the
    model): the texts and their ids."""
    n = len(clean.src_ids if clean.src_ids is not None else clean.ids)
    cands, ids = [], []
    for cand in corruption_candidates(text):
        try:
            cand_ids = text_ids(model, tokenizer, cand)
        except ValueError:
            continue
        if len(cand_ids) == n and tuple(cand_ids) != (clean.src_ids or clean.ids):
            cands.append(cand)
            ids.append(cand_ids)
    return cands, ids


@torch.no_grad()
def default_corruption(model: VizTransformer, tokenizer, clean: Prompt, text: str, progress=None) -> str:
    """The corrupted text the page starts with: of :func:`fitting_corruptions`, the one that moves the model's
    output most (total variation distance of the distribution at the last position; for an encoder-decoder,
    averaged over the decoder's positions, the clean output read in both runs). ``text`` itself when no candidate
    fits (then the page asks for an edit). ``progress(candidates done, candidates)`` after each batched pass."""
    cands, ids = fitting_corruptions(model, tokenizer, clean, text)
    if not cands:
        return text
    p_clean = torch.softmax(model(clean.tokens, **clean.kwargs).float(), dim=-1)  # [1, pos, d_vocab]
    scores = []
    step = copies_per_pass(model, len(clean.ids))
    for start in range(0, len(ids), step):
        chunk = torch.tensor(ids[start:start + step])
        if clean.src_ids is None:
            p = torch.softmax(model(chunk)[:, -1].float(), dim=-1)
            scores += (0.5 * (p - p_clean[:, -1]).abs().sum(-1)).tolist()
        else:
            p = torch.softmax(model(clean.tokens.expand(len(chunk), -1), src_tokens=chunk).float(), dim=-1)
            scores += (0.5 * (p - p_clean).abs().sum(-1).mean(-1)).tolist()
        if progress is not None:
            progress(len(scores), len(ids))
    return cands[int(np.argmax(scores))]


def top_ids(logits: np.ndarray, k: int = 10) -> list[int]:
    """The ``k`` highest-logit token ids, best first."""
    return [int(i) for i in np.argsort(-logits, kind="stable")[:k]]


# ---- direct logit attribution -------------------------------------------------------------------------------

@torch.no_grad()
def attribution_view(model: VizTransformer, prompt: Prompt, token_id: int, pos: int) -> tuple[dict[str, float], float]:
    """:func:`viz_model.attribution.direct_logit_attribution` of ``token_id`` at ``pos`` and the model's own logit
    ``logits[0, pos, token_id]`` from the same run.

    Raises:
        ValueError: a model it does not support (one line, from :func:`viz_model.attribution.check_supported`).
    """
    attribution.check_supported(model)
    logits, cache = model.run_with_cache(prompt.tokens, names_filter=attribution.attribution_hooks(model),
                                         **prompt.kwargs)
    return attribution.direct_logit_attribution(model, cache, token_id, pos), float(logits[0, pos, token_id])
