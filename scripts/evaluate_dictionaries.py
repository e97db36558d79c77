"""Second stage of ``scripts/train_dictionaries.py`` (see its docstring): measure the shipped dictionaries on held-out
stories, write their card and quality table, the shipped corpus and each dictionary's top-context index."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dictionary_recipe import (BATCH, D_SAE, DEAD_TOKENS, K, LR, ROOT, STEPS, STEPS_BY_LAYER, TRAIN_TOKENS, WINDOW,
                               encode_all, log)
from viz_model.features import collect_activations, load_dictionary, token_windows
from viz_model.features.index import build_index, save_corpus, save_index
from viz_model.features.readout import fvu
from viz_model.features.saelens import weights_bytes

TEST_SLICE = ROOT / "tests" / "data" / "dictionary_heldout.txt"
TEST_SLICE_CHARS = 12_000


@torch.no_grad()
def evaluate(model, tok, data: Path, out: Path, hooks: list[str], eval_tokens: int, window: int) -> list[dict]:
    text = (data / "tinystories-valid-head.txt").read_text(encoding="utf-8")
    ids = tok.encode(text).ids
    windows = token_windows(ids[:eval_tokens], window)
    # the tests' slice: the end of the held-out file, after the evaluated tokens
    tail = text[-TEST_SLICE_CHARS:]
    TEST_SLICE.write_text(tail[tail.index("\n\n") + 2:], encoding="utf-8")
    log(f"held-out: {windows.numel():,} tokens in {len(windows)} windows of {window}")
    save_corpus(windows, out)
    acts = collect_activations(model, windows, hooks, batch_size=32)
    rows = []
    for name in hooks:
        d = load_dictionary(out / name)
        x = acts.pop(name)
        feats, recon = encode_all(d, x)
        active = (feats > 0)
        row = {"hook": name, "architecture": d.architecture, "k": d.k, "d_sae": d.d_sae,
               "fvu": round(fvu(x, recon), 4), "mean_l0": round(float(active.sum(-1).float().mean()), 2),
               "dead_fraction": round(float((~active.any(0)).float().mean()), 4), "tokens": len(x),
               "weights_bytes": weights_bytes(out / name)}
        log(f"{row}")
        index = build_index(feats.view(len(windows), window, d.d_sae))
        save_index(index, out / name)
        rows.append(row)
        del feats, recon
    (out / "quality.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    write_card(out, rows, windows.numel())
    return rows


def write_card(out: Path, rows: list[dict], n_tokens: int) -> None:
    more = "; ".join(f"layer {layer}: {n} steps" for layer, n in sorted(STEPS_BY_LAYER.items()))
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    table = "\n".join(f"| `{r['hook']}` | {r['architecture']} (k={r['k']}) | {r['d_sae']:,} | {r['fvu']:.3f} | "
                      f"{r['mean_l0']:.1f} | {r['dead_fraction']:.1%} |" for r in rows)
    card = f"""# Sparse dictionaries of tinystories-6l

One sparse autoencoder (SAE) per layer of the shipped default model `assets/models/tinystories-6l.safetensors`,
each reading and reconstructing the residual stream after its block (`blocks.<l>.hook_resid_post`), in SAELens's
layout (`cfg.json` + `sae_weights.safetensors`, float16). Load one with
`viz_model.features.load_dictionary("assets/dictionaries/tinystories-6l/blocks.3.hook_resid_post")`.

## Quality on held-out stories

Measured by `scripts/train_dictionaries.py --stage evaluate` on the first {n_tokens:,} tokens of
`tinystories-valid-head.txt` (TinyStories validation split: never seen by the model or the dictionaries), in
windows of {WINDOW} tokens each run from position 0, with the float16 weights as shipped (computed in float32).
FVU: fraction of variance unexplained, sum of squared errors over sum of squared deviations from the mean
activation (pooled over all tokens). L0: active features per token. Dead: features never active on those tokens.
Goals (issue 24): FVU <= 0.25, mean L0 <= 32, dead <= 10 %.

| hook | activation | features | FVU | mean L0 | dead |
|---|---|---|---|---|---|
{table}

## Recipe

`python scripts/train_dictionaries.py` (its docstring is the recipe; seed 0). Training text: the first
{TRAIN_TOKENS:,} tokens of `tinystories-train-head.txt` (the model's own training stories) in windows of {WINDOW};
{D_SAE:,} features, TopK with k = {K} (Gao et al. 2024, "Scaling and evaluating sparse autoencoders"),
{STEPS} Adam steps of {BATCH:,} activations{f" ({more})" if more else ""} (learning rate {LR}, linear decay over the
last 20 %), unit-norm decoder rows, inputs scaled to unit mean squared norm during training (folded back into the
saved weights), the AuxK loss (1/32) on dead features (none active over the last {DEAD_TOKENS:,} training activations).

## Top-context index and corpus

`corpus.safetensors` holds the {n_tokens:,} held-out tokens above as int16 ids ({(out / 'corpus.safetensors').stat().st_size:,}
bytes); each folder's `top_contexts.safetensors` holds every feature's 8 strongest contexts there (at most one per
window; 24 tokens each with the feature's activation on every token), its activation histogram (20 bins) and firing
frequency (`viz_model.features.index`). All files here: {total / 2**20:.1f} MB.

## Data and licence

The corpus is an excerpt of TinyStories (Ronen Eldan and Yuanzhi Li, 2023, arXiv:2305.07759; Hugging Face dataset
`roneneldan/TinyStories`), licensed CDLA-Sharing-1.0, taken unchanged as token ids; the dictionaries were trained on
activations of TinyStories text.
"""
    (out / "README.md").write_text(card, encoding="utf-8")
