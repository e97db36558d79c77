"""Scores that find known kinds of attention heads, computed from a model's own attention patterns (as in
TransformerLens' head detectors and Olsson et al., 2022, "In-context Learning and Induction Heads").

One implementation for the app's head summaries (:mod:`viz_ui.analysis.heads`) and the training timelines
(:mod:`viz_model.loading.timeline`).
"""

from __future__ import annotations

import torch

from viz_model.model import VizTransformer

REPEATED_SCORES = ("previous-token", "duplicate-token", "induction")


def diagonal_score(patterns, offset: int, start: int):
    """Mean attention from query ``i`` to key ``i - offset`` over the queries ``i >= start``.

    ``patterns`` ``[..., query_pos, key_pos]`` (e.g. ``[n_layers, n_heads, query_pos, key_pos]``), a torch tensor
    or a numpy array -> ``[...]`` of the same kind.
    """
    rows = list(range(start, patterns.shape[-1]))
    return patterns[..., rows, [r - offset for r in rows]].mean(-1)


def default_length(n_ctx: int) -> int:
    """Length of the random half of the repeated sequence: ``min(50, n_ctx // 2)`` tokens, at least 1."""
    return max(1, min(50, n_ctx // 2))


def repeated_tokens(d_vocab: int, length: int, seed: int = 0) -> torch.Tensor:
    """A random token sequence repeated twice: ``[1, 2 * length]`` int64, uniform over ``0 .. d_vocab - 1``,
    drawn from ``torch.Generator().manual_seed(seed)`` (the same sequence on every machine)."""
    half = torch.randint(0, d_vocab, (1, length), generator=torch.Generator().manual_seed(seed))
    return torch.cat([half, half], dim=1)


@torch.no_grad()
def repeated_patterns(model: VizTransformer, length: int | None = None, seed: int = 0,
                      src_tokens: torch.Tensor | None = None) -> torch.Tensor:
    """Every decoder layer's ``hook_pattern`` on :func:`repeated_tokens`:
    ``[n_layers, n_heads, 2 * length, 2 * length]`` float32 (``length`` default :func:`default_length`).
    ``src_tokens`` ``[1, src_pos]``: what an encoder-decoder's encoder reads."""
    cfg = model.cfg
    length = length or default_length(cfg.n_ctx)
    ids = repeated_tokens(cfg.d_vocab, length, seed)
    kwargs = {"src_tokens": src_tokens} if src_tokens is not None else {}
    _, cache = model.run_with_cache(ids, names_filter=lambda n: n.startswith("blocks.")
                                    and n.endswith(".attn.hook_pattern"), **kwargs)
    return torch.stack([cache[f"blocks.{i}.attn.hook_pattern"][0].float() for i in range(cfg.n_layers)])


def repeated_scores(model: VizTransformer, length: int | None = None, seed: int = 0,
                    src_tokens: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Three ``[n_layers, n_heads]`` scores in [0, 1] on a random sequence of ``length`` tokens repeated twice
    (:func:`repeated_tokens`; ``length`` default :func:`default_length`):

    - ``previous-token``: mean weight of query ``i`` on key ``i - 1``, over queries ``1 .. 2 length - 1``;
    - ``duplicate-token``: mean weight of each token of the second copy on the same token in the first copy
      (key ``i - length``);
    - ``induction``: mean weight of each token of the second copy on the token right after its earlier
      occurrence (key ``i - length + 1``: "A B … A → B", Olsson et al., 2022).
    """
    length = length or default_length(model.cfg.n_ctx)
    pat = repeated_patterns(model, length, seed, src_tokens)
    return {"previous-token": diagonal_score(pat, 1, 1), "duplicate-token": diagonal_score(pat, length, length),
            "induction": diagonal_score(pat, length - 1, length)}
