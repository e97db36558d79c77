"""Generate from the command line: ``python -m viz_model.generate --model PATH TEXT...``.

Prints one line per input text: for an encoder-decoder model the decoder's output (e.g. the shipped
date model turns ``3rd of March 2021`` into ``2021-03-03``); for a decoder-only model the continuation
of the text (``--n-new`` tokens). Greedy unless ``--temperature`` is above 0. From Python:
:func:`viz_model.seq2seq.translate` and :func:`viz_model.sampling.generate`.
"""

from __future__ import annotations

import argparse
import sys

from viz_model.sampling import generate
from viz_model.seq2seq import translate
from viz_model.loading.sources import load_model
from viz_model.loading.weights import CheckpointError


def run(model, tokenizer, text: str, temperature: float = 0.0, seed: int = 0, n_new: int = 40) -> str:
    """The output line for one input ``text`` (see the module docstring).

    Raises:
        ValueError: for a text with no tokens or invalid sampling settings.
    """
    if model.cfg.is_encoder_decoder:
        return translate(model, tokenizer, text, temperature, seed)[0]
    ids = tokenizer.encode(text).ids[:model.cfg.n_ctx]
    if not ids:
        raise ValueError("the text has no tokens")
    steps = generate(model, ids, n_new, temperature, seed=seed)
    return tokenizer.decode([s.token_id for s in steps])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m viz_model.generate", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="checkpoint (any format load_model reads; default: the shipped model)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-new", type=int, default=40, help="tokens to add (decoder-only models)")
    p.add_argument("texts", nargs="+", metavar="TEXT")
    args = p.parse_args(argv)
    try:
        model, tokenizer = load_model(args.model)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if tokenizer is None:
        print("error: this checkpoint has no tokenizer", file=sys.stderr)
        return 2
    status = 0
    for text in args.texts:
        try:
            print(run(model, tokenizer, text, args.temperature, args.seed, args.n_new))
        except ValueError as exc:
            print(f"error: {text!r}: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
