"""Train a byte-level BPE tokenizer and a small VizTransformer on plain text, or an encoder-decoder on
source → target pairs.

Usage::

    python -m viz_model.training --corpus stories.txt [--valid held_out.txt] --out assets/models/mine.safetensors
    python -m viz_model.training --task dates --n-encoder-layers 2 --out assets/models/dates.safetensors
    python -m viz_model.training --pairs pairs.tsv --n-encoder-layers 2 --out assets/models/pairs.safetensors

Without ``--valid`` the last 5 % of the corpus is held out. The run is deterministic for a given
``--seed`` and thread count. Validation loss is reported in nats/token and bits/character.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm

from viz_model.loading.checkpoint import save_checkpoint
from viz_model.config import Config, ConfigError
from viz_model.model import VizTransformer
from viz_model.training.loop import lm_batches, train_steps
from viz_model.training.schedule import cosine_lr  # noqa: F401  (re-exported: tests and the pairs trainer import it from here)
from viz_model.tokenizer import count_chars, iter_chunks, train_bpe
from viz_model.training.train_pairs import main_pairs


@dataclass
class EvalResult:
    nats_per_token: float  # mean cross-entropy of the predicted tokens, natural log
    bits_per_char: float  # the same loss per character of text: nats * tokens / (chars * ln 2)
    n_tokens: int


def encode(tokenizer: Tokenizer, text: str) -> torch.Tensor:
    """Token ids of ``text`` as a 1-D int64 tensor (encoded in line-aligned chunks)."""
    ids: list[int] = []
    for enc in tokenizer.encode_batch(list(iter_chunks(text))):
        ids.extend(enc.ids)
    return torch.tensor(ids, dtype=torch.long)


@torch.no_grad()
def evaluate(model: VizTransformer, tokenizer: Tokenizer, ids: torch.Tensor, max_tokens: int | None = None) -> EvalResult:
    """Cross-entropy over non-overlapping windows of ``n_ctx`` tokens (the first of each is context only).

    Returns nats/token and bits/character, where characters are those of the predicted tokens.

    Raises:
        ValueError: when ``ids`` (cut to ``max_tokens``) holds fewer than 2 tokens.
    """
    if max_tokens:
        ids = ids[:max_tokens]
    if len(ids) < 2:
        raise ValueError("the validation text is too short to evaluate (fewer than 2 tokens)")
    was_training = model.training
    model.eval()
    n_ctx, total_nats, n_pred, n_chars = model.cfg.n_ctx, 0.0, 0, 0
    for start in range(0, len(ids) - 1, n_ctx):
        window = ids[start:start + n_ctx]
        if len(window) < 2:
            break
        logits = model(window[None])[0, :-1]
        total_nats += float(F.cross_entropy(logits, window[1:], reduction="sum"))
        n_pred += len(window) - 1
        n_chars += count_chars(tokenizer, window[1:].tolist())
    model.train(was_training)
    nats = total_nats / n_pred
    return EvalResult(nats, total_nats / (n_chars * math.log(2)), n_pred)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m viz_model.training", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", nargs="+", type=Path, help="plain-text training file(s) (a decoder-only model)")
    p.add_argument("--task", choices=["dates"], help="an encoder-decoder on generated pairs: dates -> ISO 8601")
    p.add_argument("--pairs", type=Path, help="an encoder-decoder on source<TAB>target lines of a UTF-8 file")
    p.add_argument("--n-encoder-layers", type=int, default=2, help="encoder blocks (with --task or --pairs)")
    p.add_argument("--mlp", default="gelu", choices=["gelu", "relu", "swiglu"], help="feed-forward activation")
    p.add_argument("--n-experts", type=int, default=0, help="mixture of experts: feed-forward networks per block "
                   "(each of width --d-mlp; 0 = one dense MLP)")
    p.add_argument("--experts-per-token", type=int, default=2, help="mixture of experts: experts per token (top-k)")
    p.add_argument("--aux-loss-coef", type=float, default=0.01, help="mixture of experts: weight of the "
                   "load-balancing loss (1 = balanced) added to the cross-entropy")
    p.add_argument("--n-pairs", type=int, default=200_000, help="generated training pairs (--task)")
    p.add_argument("--eval-pairs", type=int, default=5000, help="held-out pairs for exact match")
    p.add_argument("--valid", type=Path, help="plain-text validation file (default: last 5%% of the corpus)")
    p.add_argument("--out", required=True, type=Path, help="output .safetensors path")
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--n-heads", type=int, default=8)
    p.add_argument("--d-mlp", type=int, help="feed-forward width (default 4 * d_model)")
    p.add_argument("--n-ctx", type=int, default=256, help="context length in tokens")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--positional", default="sinusoidal", choices=["sinusoidal", "learned", "none"])
    p.add_argument("--norm-placement", default="pre", choices=["pre", "post"])
    p.add_argument("--untied", action="store_true", help="a separate unembedding matrix W_U")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=500, help="validation every N steps (0: only at the end)")
    p.add_argument("--eval-tokens", type=int, default=100_000, help="validation tokens used during training")
    p.add_argument("--snapshot-every", type=int, default=0, help="also save the model every N steps")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for speed (weights stay float32)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    args = p.parse_args(argv)
    if sum(x is not None for x in (args.corpus, args.task, args.pairs)) != 1:
        p.error("give exactly one of --corpus, --task or --pairs")
    return args


def main(argv: list[str] | None = None) -> EvalResult:
    args = parse_args(argv)
    command = "python -m viz_model.training " + shlex.join(sys.argv[1:] if argv is None else argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.task or args.pairs:
        if args.pairs and not args.pairs.is_file():
            sys.exit(f"error: no such file: {args.pairs}")
        return main_pairs(args, command)
    for f in [*args.corpus, *([args.valid] if args.valid else [])]:
        if not f.is_file():
            sys.exit(f"error: no such file: {f}")
    text = "".join(f.read_text(encoding="utf-8", errors="replace") for f in args.corpus)
    if args.valid:
        train_text, valid_text = text, args.valid.read_text(encoding="utf-8", errors="replace")
    else:
        cut = text.rfind("\n", 0, int(len(text) * 0.95)) + 1 or int(len(text) * 0.95)
        train_text, valid_text = text[:cut], text[cut:]
    if not train_text.strip():
        sys.exit("error: the corpus is empty")

    t0 = time.time()
    tokenizer = train_bpe(iter_chunks(train_text), args.vocab_size)
    train_ids, valid_ids = encode(tokenizer, train_text), encode(tokenizer, valid_text)
    print(f"tokenizer: {tokenizer.get_vocab_size()} tokens; train {len(train_ids):,} tokens "
          f"({len(train_text) / len(train_ids):.2f} chars/token), valid {len(valid_ids):,} tokens")
    if len(valid_ids) < 2:
        sys.exit("error: the validation text has fewer than 2 tokens; give a longer --valid file")
    if len(train_ids) <= args.n_ctx + 1:
        sys.exit(f"error: the corpus has {len(train_ids)} tokens, fewer than the context ({args.n_ctx}) + 2")

    d_head, rem = divmod(args.d_model, args.n_heads)
    if rem:
        sys.exit("error: --d-model must be a multiple of --n-heads")
    cfg = Config(n_layers=args.n_layers, d_model=args.d_model, n_heads=args.n_heads, d_head=d_head,
                 d_mlp=args.d_mlp or 4 * args.d_model, d_vocab=tokenizer.get_vocab_size(), n_ctx=args.n_ctx,
                 positional=args.positional, norm_placement=args.norm_placement, mlp=args.mlp,
                 tied_embeddings=not args.untied, dropout=args.dropout, n_experts=args.n_experts,
                 experts_per_token=args.experts_per_token,
                 final_norm=args.norm_placement == "pre")  # post-LN blocks already end with a LayerNorm
    try:
        cfg.validate()
    except ConfigError as exc:
        sys.exit(f"error: {exc}")
    model = VizTransformer(cfg)
    model.init_weights(seed=args.seed)
    print(f"model: {model.n_params():,} parameters ({cfg.n_layers} layers, {cfg.n_heads} heads, d_model {cfg.d_model})")
    model.train()
    batches = lm_batches(train_ids, args.n_ctx, args.batch_size, args.seed)
    bar = tqdm(total=args.steps, desc="training", unit="step", dynamic_ncols=True, mininterval=2.0)
    for done in train_steps(model, batches, args.steps, args.lr, args.min_lr, args.warmup, args.weight_decay,
                            bf16=args.bf16, aux_loss_coef=args.aux_loss_coef if args.n_experts else 0.0):
        step, loss = done.step, done.loss
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", **({"balance": f"{done.aux_loss:.3f}"} if args.n_experts else {}))
        if args.eval_every and step % args.eval_every == 0 and step < args.steps:
            res = evaluate(model, tokenizer, valid_ids, args.eval_tokens)
            bar.write(f"step {step}: train loss {loss:.3f}, valid {res.nats_per_token:.3f} nats/token, "
                      f"{res.bits_per_char:.3f} bits/char (first {res.n_tokens:,} tokens)")
        if args.snapshot_every and step % args.snapshot_every == 0 and step < args.steps:
            snap = args.out.with_name(args.out.stem + ".snapshots") / f"step_{step:06d}.safetensors"
            model.eval()
            save_checkpoint(model, tokenizer, snap, {"step": str(step), "command": command})
    bar.close()
    model.eval()
    res = evaluate(model, tokenizer, valid_ids)
    minutes = (time.time() - t0) / 60
    print(f"final validation: {res.nats_per_token:.4f} nats/token, {res.bits_per_char:.4f} bits/char "
          f"over {res.n_tokens:,} tokens; {minutes:.1f} min")
    model.cfg.dropout = 0.0
    save_checkpoint(model, tokenizer, args.out, {
        "command": command, "steps": str(args.steps), "train_minutes": f"{minutes:.1f}",
        "valid_nats_per_token": f"{res.nats_per_token:.4f}", "valid_bits_per_char": f"{res.bits_per_char:.4f}"})
    print(f"saved {args.out}")
    return res


if __name__ == "__main__":
    main()
