"""Train, evaluate and index the shipped transcoders of the default model (tinystories-6l), for attribution graphs.

    python scripts/train_transcoders.py [--data ../shared/data] [--stage all|train|evaluate] [--layers 0 1 ...]

Recipe (``--stage train``):

- Text the model never saw in training: ``tinystories-valid-head.txt`` (TinyStories' validation split; the model was
  trained on the train split only). Its first ``EVAL_TOKENS`` tokens are the held-out evaluation text (the same
  corpus the shipped SAEs are measured on, ``corpus.safetensors``) and its last ``TEST_SLICE_CHARS`` characters are
  the tests' slice; the transcoders train on what lies between, in windows of ``WINDOW`` tokens run from position 0.
- One per-layer transcoder per block: reads ``blocks.{l}.ln2.hook_normalized`` (the MLP's input), predicts
  ``blocks.{l}.hook_mlp_out`` (the MLP's output), ``D_SAE`` features, TopK with ``K``, ``STEPS`` Adam steps of
  ``BATCH`` activations (learning rate ``LR``, linear decay over the last 20 %), the AuxK loss on dead features
  (:func:`viz_model.features.train_on_activations` states the whole recipe).
- Features that fire on fewer than ``MIN_FIRES`` training tokens are removed before saving (``--stage prune`` does the
  same to saved transcoders): a feature almost never used on the training text is dead on held-out text too; each
  layer keeps the features its MLP uses.
- Saved as float16 in SAELens's layout in ``assets/dictionaries/tinystories-6l/blocks.{l}.ln2.hook_normalized/``.

``--stage evaluate`` measures each saved transcoder (float16 as shipped, computed in float32) on the held-out text:
FVU of ``hook_mlp_out``, mean L0, dead features (never active there); builds each one's top-context index on the
shared corpus; and scores the attribution graphs they give (:func:`viz_model.circuits.attribute`, every active
feature, no cap) on ``N_PROMPTS`` held-out prompts of ``PROMPT_TOKENS`` tokens after ``<|endoftext|>``: the median
unpruned replacement and completeness scores. Everything goes into ``quality.json`` (beside the SAEs' rows) and the
folder's card ``README.md``.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from dictionary_recipe import EVAL_TOKENS, OUT, WINDOW, encode_all, log, stage_args
from viz_model import load_model
from viz_model.circuits import attribute, graph_scores
from viz_model.features import collect_activations, load_dictionary, save_dictionary, token_windows, train_on_activations
from viz_model.features.dictionary import SparseDictionary
from viz_model.features.index import build_index, save_index
from viz_model.features.readout import fvu
from viz_model.features.saelens import weights_bytes
from viz_model.tokenizer import END_OF_TEXT

TEST_SLICE_CHARS = 12_000
D_SAE, K, STEPS, BATCH, LR, SEED, DEAD_TOKENS = 2048, 24, 1500, 1024, 1e-3, 0, 100_000
N_PROMPTS, PROMPT_TOKENS = 24, 32
MIN_FIRES = 8  # a feature kept fires on at least this many training tokens (rarer ones are removed, see prune)


def in_hook(layer: int) -> str:
    return f"blocks.{layer}.ln2.hook_normalized"


def out_hook(layer: int) -> str:
    return f"blocks.{layer}.hook_mlp_out"


def split(tok, data: Path) -> tuple[list[int], list[int]]:
    """``(held-out ids, training ids)`` of the validation file (module docstring)."""
    text = (data / "tinystories-valid-head.txt").read_text(encoding="utf-8")
    ids = tok.encode(text[:-TEST_SLICE_CHARS]).ids
    return ids[:EVAL_TOKENS], ids[EVAL_TOKENS + WINDOW:]  # one window's gap between the two


def prune_dead(d: SparseDictionary, alive: torch.Tensor) -> SparseDictionary:
    """The same transcoder without the features where ``alive`` is False."""
    keep = alive.nonzero().flatten()
    out = SparseDictionary(d.d_in, len(keep), d.hook_name, d.architecture, min(d.k, len(keep)), d.hook_name_out, d.d_out,
                           apply_b_dec_to_input=False)
    with torch.no_grad():
        out.W_enc.copy_(d.W_enc[:, keep])
        out.b_enc.copy_(d.b_enc[keep])
        out.W_dec.copy_(d.W_dec[keep])
        out.b_dec.copy_(d.b_dec)
    return out.eval().requires_grad_(False)


@torch.no_grad()
def fired(d: SparseDictionary, x: torch.Tensor, min_fires: int = 1) -> torch.Tensor:
    """Which features fire on at least ``min_fires`` of the rows of ``x``."""
    counts = torch.zeros(d.d_sae, dtype=torch.long)
    for i in range(0, len(x), 8192):
        counts += (d.encode(x[i:i + 8192].float()) > 0).sum(0)
    return counts >= min_fires


def prune(model, tok, data: Path, layers: list[int]) -> None:
    """Remove from the saved transcoders the features that fire on fewer than ``MIN_FIRES`` training tokens."""
    _, ids = split(tok, data)
    windows = token_windows(ids, WINDOW)
    acts = collect_activations(model, windows, [in_hook(layer) for layer in layers], batch_size=32)
    for layer in layers:
        d = load_dictionary(OUT / in_hook(layer))
        alive = fired(d, acts.pop(in_hook(layer)), MIN_FIRES)
        log(f"layer {layer}: {int(alive.sum())} of {d.d_sae} features fire on at least {MIN_FIRES} training tokens")
        if not alive.all():
            save_dictionary(prune_dead(d, alive), OUT / in_hook(layer), torch.float16, model_name="tinystories-6l",
                            context_size=WINDOW, training_tokens=STEPS * BATCH,
                            training_text=f"tinystories-valid-head.txt (after the first {EVAL_TOKENS} tokens)")


def train(model, tok, data: Path, layers: list[int]) -> None:
    _, ids = split(tok, data)
    windows = token_windows(ids, WINDOW)
    log(f"collecting activations of {windows.numel():,} training tokens (layers {layers})")
    names = [h for layer in layers for h in (in_hook(layer), out_hook(layer))]
    acts = collect_activations(model, windows, names, batch_size=32, dtype=torch.float16)
    for layer in layers:
        x, y = acts.pop(in_hook(layer)), acts.pop(out_hook(layer))
        log(f"training layer {layer}: {D_SAE} features, k={K}, {STEPS} steps")
        d, res = train_on_activations(x, y, D_SAE, in_hook(layer), "topk", K, hook_name_out=out_hook(layer),
                                      steps=STEPS, batch_size=BATCH, lr=LR, dead_tokens=DEAD_TOKENS, seed=SEED,
                                      progress=lambda f, m: log(f"  {m}") if round(f * 50) % 5 == 0 else None)
        alive = fired(d, x, MIN_FIRES)
        log(f"  done: {res}; {int(alive.sum())} of {D_SAE} features fire on at least {MIN_FIRES} training tokens")
        d = prune_dead(d, alive)
        save_dictionary(d, OUT / in_hook(layer), torch.float16, model_name="tinystories-6l", context_size=WINDOW,
                        training_tokens=STEPS * BATCH, training_text="tinystories-valid-head.txt (after the first "
                        f"{EVAL_TOKENS} tokens)")


@torch.no_grad()
def evaluate(model, tok, data: Path, n_layers: int) -> list[dict]:
    held, _ = split(tok, data)
    windows = token_windows(held, WINDOW)
    names = [h for layer in range(n_layers) for h in (in_hook(layer), out_hook(layer))]
    acts = collect_activations(model, windows, names, batch_size=32)
    rows, tcs = [], {}
    for layer in range(n_layers):
        d = load_dictionary(OUT / in_hook(layer))
        tcs[layer] = d
        x, y = acts.pop(in_hook(layer)), acts.pop(out_hook(layer))
        feats, recon = encode_all(d, x)
        active = feats > 0
        row = {"hook": in_hook(layer), "hook_out": out_hook(layer), "kind": "transcoder",
               "architecture": d.architecture, "k": d.k, "d_sae": d.d_sae, "fvu": round(fvu(y, recon), 4),
               "mean_l0": round(float(active.sum(-1).float().mean()), 2),
               "dead_fraction": round(float((~active.any(0)).float().mean()), 4), "tokens": len(x),
               "weights_bytes": weights_bytes(OUT / in_hook(layer))}
        log(str(row))
        save_index(build_index(feats.view(len(windows), WINDOW, d.d_sae)), OUT / in_hook(layer))
        rows.append(row)
    bos = tok.token_to_id(END_OF_TEXT)
    scores, timing = [], []
    for i in range(N_PROMPTS):
        start = i * (len(held) // N_PROMPTS)
        prompt = torch.tensor([bos] + held[start:start + PROMPT_TOKENS - 1])
        t0 = time.perf_counter()
        graph = attribute(model, prompt, tcs, zero_first_position=True)
        timing.append(time.perf_counter() - t0)
        scores.append(graph_scores(graph))
        log(f"prompt {i}: {graph.n_features} features, scores {scores[-1]}, {timing[-1]:.1f} s")
    summary = {"kind": "graphs", "prompts": N_PROMPTS, "prompt_tokens": PROMPT_TOKENS,
               "median_replacement_score": round(statistics.median(s[0] for s in scores), 4),
               "median_completeness_score": round(statistics.median(s[1] for s in scores), 4),
               "min_replacement_score": round(min(s[0] for s in scores), 4)}
    log(str(summary))
    quality = OUT / "quality.json"
    old = [r for r in json.loads(quality.read_text(encoding="utf-8")) if r.get("kind", "sae") == "sae"] \
        if quality.exists() else []
    for r in old:
        r.setdefault("kind", "sae")
    quality.write_text(json.dumps(old + rows + [summary], indent=2) + "\n", encoding="utf-8")
    write_card(rows, summary, len(held))
    return rows


def write_card(rows: list[dict], summary: dict, n_tokens: int) -> None:
    card = OUT / "README.md"
    text = card.read_text(encoding="utf-8") if card.exists() else "# Sparse dictionaries of tinystories-6l\n"
    head = text.split("\n## Transcoders")[0].rstrip() + "\n"
    table = "\n".join(f"| `{r['hook']}` → `{r['hook_out']}` | topk (k={r['k']}) | {r['d_sae']:,} | {r['fvu']:.3f} | "
                      f"{r['mean_l0']:.1f} | {r['dead_fraction']:.1%} |" for r in rows)
    size = sum(r["weights_bytes"] for r in rows)
    section = f"""
## Transcoders (attribution graphs)

One per-layer transcoder per block (`blocks.<l>.ln2.hook_normalized/`): it reads the MLP's input and predicts the
MLP's output (`blocks.<l>.hook_mlp_out`), float16, {size / 2 ** 20:.1f} MB of weights in all. The Circuits page and
`viz_model.circuits.attribute` build attribution graphs with them; the Features page shows their features.

Measured by `scripts/train_transcoders.py --stage evaluate` on the same {n_tokens:,} held-out tokens (never seen by
the model or the transcoders). FVU of the MLP's output, mean L0, dead features (never active there). Goals (issue
50): FVU <= 0.25, mean L0 <= 32, dead <= 10 %, median unpruned replacement score >= 0.6.

| reads → writes | activation | features | FVU | mean L0 | dead |
|---|---|---|---|---|---|
{table}

Attribution graphs of {summary['prompts']} held-out prompts of {summary['prompt_tokens']} tokens (after
`<|endoftext|>`, whose features and error are left out, as circuit-tracer does), every active feature a node:
median replacement score **{summary['median_replacement_score']:.3f}** (lowest {summary['min_replacement_score']:.3f}),
median completeness score {summary['median_completeness_score']:.3f}.

Recipe: `python scripts/train_transcoders.py` (its docstring; seed 0): trained on the rest of
`tinystories-valid-head.txt` (text the model never saw: the validation split) in windows of {WINDOW},
{D_SAE:,} features, TopK with k = {K}, {STEPS:,} Adam steps of {BATCH:,} activations (learning rate {LR}), the AuxK loss
on dead features; the features that fired on fewer than {MIN_FIRES} training tokens removed before saving.
"""
    card.write_text(head + section, encoding="utf-8")


def main() -> None:
    args = stage_args(__doc__.splitlines()[0], ("all", "train", "prune", "evaluate"))
    torch.manual_seed(SEED)
    model, tok = load_model()
    model.eval()
    if args.stage in ("all", "train"):
        train(model, tok, args.data, args.layers or list(range(model.cfg.n_layers)))
    if args.stage == "prune":
        prune(model, tok, args.data, args.layers or list(range(model.cfg.n_layers)))
    if args.stage in ("all", "evaluate"):
        evaluate(model, tok, args.data, model.cfg.n_layers)


if __name__ == "__main__":
    main()
