"""Train a small decoder and keep a training timeline (snapshots where structure forms), with the project's one
training loop (:func:`viz_model.training.loop.train_steps`).

Usage (the shipped ``assets/timelines/induction-2l``; its README.md has the exact command)::

    python -m viz_model.training.timeline_train --train stories.txt --valid held_out.txt --out assets/timelines/NAME

The batches mix natural text and repeated random segments: ``--repeat-fraction`` of each batch's rows are a
random segment of 10-60 uniformly drawn token ids repeated to fill the row (the rest are windows of the
stories). A repeated segment can only be predicted by looking back to its earlier occurrence, which rewards an
induction head (Olsson et al., 2022); natural stories alone form one far more slowly at this size.

Snapshots: a log-spaced schedule from initialisation (step 0) to the end (:func:`timeline.log_spaced_steps`),
plus the steps where the best induction score moves: it is measured every ``--probe-every`` steps on the live
weights, a float16 copy of the weights is kept at each of those steps, and the ones around a change of at
least ``--move`` join the timeline. Every number in ``timeline.json`` and the card (losses, scores) is then
measured on the snapshot as stored (float16, loaded back with :func:`viz_model.load_model`).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from viz_model.loading.checkpoint import save_checkpoint
from viz_model.config import Config
from viz_model.head_scores import repeated_scores
from viz_model.model import VizTransformer
from viz_model.loading.sources import load_model
from viz_model.tokenizer import iter_chunks, train_bpe
from viz_model.training.loop import train_steps
from viz_model.loading.timeline import log_spaced_steps, phase_change, read_timeline, snapshot_scores, write_timeline
from viz_model.training.train import encode, evaluate
from viz_model.limits import count_params

LOSS_BATCHES = 4  # fixed batches of the training mix on which each snapshot's train loss is measured


def mixed_batches(ids: torch.Tensor, n_ctx: int, batch_size: int, d_vocab: int, repeat_fraction: float,
                  segment: tuple[int, int], seed: int) -> Iterator[torch.Tensor]:
    """Endless batches ``[batch_size, n_ctx + 1]`` int64: ``round(batch_size * repeat_fraction)`` rows of a random
    segment (``segment[0]``-``segment[1]`` ids drawn uniformly from ``0 .. d_vocab - 1``) repeated to fill the row,
    the other rows random windows of ``ids``.

    Raises:
        ValueError: when ``ids`` holds ``n_ctx + 1`` tokens or fewer.
    """
    if len(ids) <= n_ctx + 1:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than the context ({n_ctx}) + 2")
    gen = torch.Generator().manual_seed(seed)
    n_rep = round(batch_size * repeat_fraction)
    offsets = torch.arange(n_ctx + 1)
    while True:
        starts = torch.randint(0, len(ids) - n_ctx - 1, (batch_size - n_rep,), generator=gen)
        rows = [ids[starts[:, None] + offsets]]
        for _ in range(n_rep):
            length = int(torch.randint(segment[0], segment[1] + 1, (1,), generator=gen))
            seg = torch.randint(0, d_vocab, (length,), generator=gen)
            rows.append(seg.repeat(-(-(n_ctx + 1) // length))[: n_ctx + 1][None])
        yield torch.cat(rows)


@torch.no_grad()
def batch_loss(model: VizTransformer, batches: list[torch.Tensor]) -> float:
    """Mean next-token cross-entropy (nats/token) of ``model`` over ``batches`` ``[batch, n_ctx + 1]``."""
    model.eval()
    losses = [F.cross_entropy(model(b[:, :-1]).flatten(0, 1), b[:, 1:].flatten()) for b in batches]
    return float(torch.stack(losses).mean())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m viz_model.training.timeline_train", description=__doc__.split("\n\n")[0])
    p.add_argument("--train", required=True, type=Path, help="plain-text training stories")
    p.add_argument("--valid", required=True, type=Path, help="plain-text held-out stories (validation loss)")
    p.add_argument("--out", required=True, type=Path, help="the timeline's folder (created; must be empty)")
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--d-mlp", type=int, default=128, help="feed-forward width (small: attention does the work here)")
    p.add_argument("--n-ctx", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=512)
    p.add_argument("--positional", default="learned", choices=["learned", "sinusoidal"])
    p.add_argument("--steps", type=int, default=4500)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--repeat-fraction", type=float, default=0.5, help="share of each batch's rows that repeat a segment")
    p.add_argument("--segment", type=int, nargs=2, default=(10, 60), metavar=("MIN", "MAX"),
                   help="length range of a repeated random segment, tokens")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-snapshots", type=int, default=30, help="log-spaced snapshots from step 0 to the end")
    p.add_argument("--probe-every", type=int, default=50, help="measure the best induction score every N steps")
    p.add_argument("--move", type=float, default=0.03, help="a probe whose best induction score moved this much "
                   "since the previous probe adds both as snapshots")
    p.add_argument("--max-extra", type=int, default=14, help="at most this many such extra snapshots")
    p.add_argument("--valid-tokens", type=int, default=32_768, help="held-out tokens each snapshot is measured on")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    return p.parse_args(argv)


def extra_steps(probes: dict[int, float], move: float, max_extra: int) -> list[int]:
    """Probe steps around the moves of the score: each probe whose value differs by at least ``move`` from the
    previous probe's, and that previous probe; the ``max_extra`` around the largest moves when there are more."""
    order = sorted(probes)
    moves = sorted(((abs(probes[b] - probes[a]), a, b) for a, b in zip(order, order[1:])
                    if abs(probes[b] - probes[a]) >= move), reverse=True)
    chosen: set[int] = set()
    for _, a, b in moves:
        if len(chosen | {a, b}) > max_extra:
            break
        chosen |= {a, b}
    return sorted(chosen)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    command = "python -m viz_model.training.timeline_train " + shlex.join(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out: Path = args.out
    if out.exists() and any(out.iterdir()):
        sys.exit(f"error: {out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    train_text = args.train.read_text(encoding="utf-8", errors="replace")
    valid_text = args.valid.read_text(encoding="utf-8", errors="replace")
    tokenizer = train_bpe(iter_chunks(train_text), args.vocab_size)
    train_ids, valid_ids = encode(tokenizer, train_text), encode(tokenizer, valid_text)[: args.valid_tokens]
    d_vocab = tokenizer.get_vocab_size()
    cfg = Config(n_layers=args.n_layers, d_model=args.d_model, n_heads=args.n_heads,
                 d_head=args.d_model // args.n_heads, d_mlp=args.d_mlp, d_vocab=d_vocab, n_ctx=args.n_ctx,
                 positional=args.positional)
    model = VizTransformer(cfg)
    model.init_weights(seed=args.seed)
    print(f"tokenizer {d_vocab} tokens; train {len(train_ids):,} tokens, valid {len(valid_ids):,}; "
          f"model {model.n_params():,} parameters", flush=True)

    scheduled = set(log_spaced_steps(args.steps, args.log_snapshots))
    kept: dict[int, dict[str, torch.Tensor]] = {}  # step -> float16 weights
    probes: dict[int, float] = {}

    def keep(step: int) -> None:
        if step in scheduled or step % args.probe_every == 0:
            kept[step] = {k: v.detach().to(torch.float16).clone() for k, v in model.state_dict().items()}
        if step % args.probe_every == 0:
            model.eval()
            probes[step] = float(repeated_scores(model)["induction"].max())
            print(f"step {step}: best induction score {probes[step]:.3f}", flush=True)

    keep(0)
    batches = mixed_batches(train_ids, args.n_ctx, args.batch_size, d_vocab, args.repeat_fraction,
                            tuple(args.segment), args.seed)
    for done in train_steps(model, batches, args.steps, args.lr, args.min_lr, args.warmup):
        keep(done.step)
        if done.step % 500 == 0:
            print(f"step {done.step}: batch loss {done.loss:.3f}, {done.seconds / 60:.1f} min", flush=True)
    minutes = (time.time() - t0) / 60

    steps = sorted(scheduled | set(extra_steps(probes, args.move, args.max_extra)))
    names = []
    for step in steps:
        model.load_state_dict({k: v.float() for k, v in kept[step].items()})
        name = f"step_{step:06d}.safetensors"
        save_checkpoint(model, tokenizer, out / name, {"step": str(step), "command": command}, dtype=torch.float16)
        names.append(name)

    # every number below is measured on the snapshots as stored (float16 weights, read back as float32)
    loss_batches = [b for b, _ in zip(mixed_batches(train_ids, args.n_ctx, args.batch_size, d_vocab,
                                                    args.repeat_fraction, tuple(args.segment), args.seed + 1),
                                      range(LOSS_BATCHES))]
    models, train_loss, valid_loss = [], [], []
    for name in names:
        snap, _ = load_model(out / name)
        models.append(snap)
        train_loss.append(batch_loss(snap, loss_batches))
        valid_loss.append(evaluate(snap, tokenizer, valid_ids).nats_per_token)
    scores = snapshot_scores(models)
    best = scores["induction"].flatten(1).max(1).values.tolist()
    jump = phase_change(steps, best)
    probe_jump = phase_change(sorted(probes), [probes[s] for s in sorted(probes)])
    info = {"name": out.name, "command": command, "seed": args.seed, "train_minutes": round(minutes, 1),
            "machine": f"{platform.machine()}, torch {torch.__version__}, {args.threads} torch thread(s)",
            "date": datetime.date.today().isoformat(),
            "data": {"train": args.train.name, "valid": args.valid.name, "valid_tokens": len(valid_ids),
                     "repeat_fraction": args.repeat_fraction, "segment": list(args.segment)},
            "losses": f"nats/token; train_loss on {LOSS_BATCHES} fixed batches of the training mix, valid_loss on "
                      f"the first {len(valid_ids):,} tokens of the held-out stories",
            "scores_note": "repeated_scores: a random sequence of 50 token ids (seed 0) repeated twice",
            "phase_change": list(jump) if jump else None,
            "probes": {"steps": sorted(probes), "best_induction": [round(probes[s], 4) for s in sorted(probes)],
                       "phase_change": list(probe_jump) if probe_jump else None}}
    write_timeline(out, steps, names, train_loss, valid_loss,
                   {k: scores[k] for k in ("previous-token", "induction", "duplicate-token")}, **info)
    (out / "README.md").write_text(model_card(out), encoding="utf-8")
    print(f"{len(steps)} snapshots in {out} ({sum(f.stat().st_size for f in out.iterdir()) / 2**20:.1f} MB), "
          f"{minutes:.1f} min; best induction {best[0]:.3f} -> {best[-1]:.3f}; valid loss {valid_loss[0]:.3f} -> "
          f"{valid_loss[-1]:.3f}; phase change {jump}", flush=True)


def model_card(folder: Path) -> str:
    """The timeline's README.md, written from its ``timeline.json`` (every number is the snapshots' own)."""
    import json

    tl = read_timeline(folder)
    data = json.loads((folder / "timeline.json").read_text(encoding="utf-8"))
    cfg = load_model(tl.snapshots[-1])[0].cfg
    best_ind = [max(max(h) for h in layers) for layers in tl.scores["induction"]]
    best_prev = [max(max(h) for h in layers) for layers in tl.scores["previous-token"]]
    jump, probes = data.get("phase_change"), data["probes"]
    machine = data["machine"].replace("1 threads", "1 torch thread").replace("1 torch thread(s)", "1 torch thread")
    size = sum(f.stat().st_size for f in folder.iterdir() if f.suffix == ".safetensors") / 2**20
    rows = "\n".join(f"| {s:,} | {tr:.3f} | {va:.3f} | {bi:.3f} | {bp:.3f} |" for s, tr, va, bi, bp in
                     zip(tl.steps, tl.train_loss, tl.valid_loss, best_ind, best_prev))
    jump_text = (f"between step {jump[0]:,} and step {jump[1]:,}" if jump else "not found (no rise of 0.3 or more)")
    valid = tl.valid_loss
    rise, low, high = max((valid[j] - min(valid[:j]), valid[:j].index(min(valid[:j])), j) for j in range(1, len(valid)))
    bump = (f" On the way down it rose once by {rise:.3f}, from {valid[low]:.3f} at step {tl.steps[low]:,} to "
            f"{valid[high]:.3f} at step {tl.steps[high]:,}, before falling again." if rise > 0.05 else "")
    probe_text = (f"between step {probes['phase_change'][0]:,} and {probes['phase_change'][1]:,}"
                  if probes.get("phase_change") else "not found")
    return f"""# {tl.name}: a training timeline where an induction head forms

{len(tl)} snapshots of one training run of a small decoder, from initialisation (step 0) to step {tl.steps[-1]:,}:
{cfg.n_layers} layers, {cfg.n_heads} heads, d_model {cfg.d_model}, d_head {cfg.d_head}, d_mlp {cfg.d_mlp}, learned
positions, context {cfg.n_ctx}, a {cfg.d_vocab}-token byte-level BPE, tied embeddings
({count(cfg):,} parameters). Each snapshot is a native checkpoint (float16 weights, {size:.1f} MB in all) that
`viz_model.load_model` reads as float32; `timeline.json` indexes them. Open it on the app's page
"6 · Training timeline" (in the sidebar's *Watch it learn* section).

## What forms when (measured)

The **best induction score** (over all heads) is the mean attention from each token of the second copy of a
random 50-token sequence repeated twice to the token right after its earlier occurrence (Olsson et al., 2022;
`viz_model.head_scores.repeated_scores`, seed 0); the **best previous-token score** is the mean attention to
the token just before, on the same sequence. The best induction score goes from {best_ind[0]:.3f} at initialisation to
{best_ind[-1]:.3f} at the end; the validation loss from {tl.valid_loss[0]:.3f} to {tl.valid_loss[-1]:.3f}
nats/token.{bump}

**Phase change** (the first snapshot whose best induction score reaches the midpoint between its first and
its largest value): {jump_text}. Measured every {probes['steps'][1] - probes['steps'][0]} steps on the live
float32 weights during training: {probe_text}.

| step | train loss | valid loss | best induction | best previous-token |
|---:|---:|---:|---:|---:|
{rows}

Losses in nats/token: train loss on {LOSS_BATCHES} fixed batches of the training mix (half repeated random
segments, whose second and later copies become predictable once the induction head forms), valid loss on the
first {data['data']['valid_tokens']:,} tokens of held-out stories only. Snapshots are log-spaced (dense early,
where unigram and bigram statistics appear) plus the steps where the probe saw the induction score move.

## Data and licence

TinyStories (Ronen Eldan and Yuanzhi Li, 2023, "TinyStories: How Small Can Language Models Be and Still Speak
Coherent English?", arXiv:2305.07759; Hugging Face dataset `roneneldan/TinyStories`), licence
**CDLA-Sharing-1.0**: training on `{data['data']['train']}` (the first 2,316 stories of the v1 train split),
validation on `{data['data']['valid']}` (opening stories of the validation split). The text files are not in this
repository. The mix: {data['data']['repeat_fraction']:.0%} of each batch's rows are a random segment of
{data['data']['segment'][0]}-{data['data']['segment'][1]} uniformly drawn token ids repeated to fill the row, the
rest windows of the stories. A repeated segment can only be predicted by looking back at its earlier occurrence,
so copying pays off from the first steps (whether stories alone would form an induction head within this step
budget was not measured).

## Recipe

Seed {data['seed']}, {data['train_minutes']} minutes ({machine}, {data['date']}, on CPU cores shared with other
jobs), AdamW (weight decay 0.1 on matrices) with warm-up and cosine decay, the project's one training loop
(`viz_model.training.loop.train_steps`):

```bash
{data['command']}
```
"""


def count(cfg: Config) -> int:

    return count_params(cfg)


if __name__ == "__main__":
    main()
