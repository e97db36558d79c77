"""Print sample continuations of a model for its model card (greedy, and sampled with fixed seeds).

Usage: python scripts/model_card_samples.py assets/models/tinystories-6l.safetensors
"""

import sys

from viz_model import generate, load_model
from viz_ui.analysis.generation import continuation_text

PROMPTS = ["Once upon a time, there was a little girl named Lily.", "Tom and his dog went to the park.",
           "The sun was hot, so"]


def main() -> None:
    model, tok = load_model(sys.argv[1] if len(sys.argv) > 1 else None)
    for prompt in PROMPTS:
        ids = tok.encode(prompt).ids
        for temperature, seed in ((0.0, 0), (0.8, 1)):
            steps = generate(model, ids, 60, temperature=temperature, seed=seed)
            text = continuation_text(tok, ids, [s.token_id for s in steps])
            mode = "greedy" if temperature == 0 else f"T = {temperature}, seed {seed}"
            print(f"- **{prompt}** ({mode}) → {text.strip()!r}\n")


if __name__ == "__main__":
    main()
