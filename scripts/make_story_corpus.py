"""Write the text that the Train-your-own page offers when the user brings none: stories *written by the shipped
model* tinystories-6l (sampled, temperature 0.8, top-p 0.95, fixed seeds), not the TinyStories data itself, which
the project does not ship.

    .venv/bin/python scripts/make_story_corpus.py [--chars 120000] [--out assets/texts/model-stories.txt]

Each story starts from one of a few opening words, runs until the model writes <|endoftext|> (or 256 tokens),
and ends with a line holding only <|endoftext|>, like the data the model was trained on. Deterministic for a
given torch build and thread count.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from viz_model import load_model
from viz_model.sampling import iter_generate
from viz_model.tokenizer import END_OF_TEXT

OPENINGS = ["Once upon a time", "One day", "Lily", "Tom and his mom", "There was a", "Sara wanted",
            "Once there was a big", "The sun was"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chars", type=int, default=120_000)
    p.add_argument("--out", type=Path, default=Path("assets/texts/model-stories.txt"))
    args = p.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_model()
    end = tokenizer.token_to_id(END_OF_TEXT)
    stories, total, seed = [], 0, 0
    while total < args.chars:
        opening = OPENINGS[seed % len(OPENINGS)]
        ids = tokenizer.encode(opening).ids
        new = []
        for step in iter_generate(model, ids, 256, temperature=0.8, top_p=0.95, seed=seed):
            if step.token_id == end:
                break
            new.append(step.token_id)
        story = tokenizer.decode(ids + new).strip()
        stories.append(story + "\n" + END_OF_TEXT + "\n")
        total += len(stories[-1])
        seed += 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(stories), encoding="utf-8")
    print(f"{len(stories)} stories, {total:,} characters -> {args.out}")


if __name__ == "__main__":
    main()
