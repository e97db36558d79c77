"""Build the default model's training text from the TinyStories excerpts in ../shared/data.

The output is ``tinystories-train-head.txt`` (cased) followed by the part of
``tinystories-lowercase.txt`` that the cased file does not hold (about 2.1 MB), with its case
restored: sentence starts and the word "i" are capitalised, and every other word gets the casing it
has most often (away from sentence starts) in the cased file, which restores names such as Lily.
The validation file is never read, so the held-out measure stays honest.

Usage: python scripts/prepare_tinystories.py --data ../shared/data --out /tmp/tinystories-train.txt
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

WORD = re.compile(r"[A-Za-z]+")
# A sentence starts at the text's start, after . ! ? (and a closing quote), at a line start, or
# after an opening double quote ("said, "yes"" -> "said, "Yes"").
SENTENCE_START = re.compile(r'(^|[.!?]["\')]?\s+|\n\s*|(?:^|\s)["(])([a-z])')


def casing_table(cased: str) -> dict[str, str]:
    """Most frequent spelling of each word, counting only words that do not start a sentence."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for m in WORD.finditer(cased):
        before = cased[max(0, m.start() - 3):m.start()]
        if m.start() == 0 or re.search(r'([.!?]["\']?\s+|\n|["(])$', before):
            continue
        counts[m.group().lower()][m.group()] += 1
    return {w: c.most_common(1)[0][0] for w, c in counts.items()}


def recase(lower: str, table: dict[str, str]) -> str:
    text = WORD.sub(lambda m: table.get(m.group(), m.group()), lower)
    return SENTENCE_START.sub(lambda m: m.group(1) + m.group(2).upper(), text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    cased = (args.data / "tinystories-train-head.txt").read_text(encoding="utf-8")
    lower = (args.data / "tinystories-lowercase.txt").read_text(encoding="utf-8")
    stories = [s.strip() for s in cased.split("<|endoftext|>") if s.strip()]
    tail = stories[-1].lower()[-100:]
    start = lower.find(tail)
    if start < 0:
        raise SystemExit("could not find where the cased excerpt ends inside the lowercase file")
    extra = lower[start + len(tail):].lstrip("\n")
    restored = recase(extra, casing_table(cased))
    args.out.write_text(cased + restored.rstrip("\n") + "\n<|endoftext|>\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(cased):,} cased + {len(restored):,} recased characters")


if __name__ == "__main__":
    main()
