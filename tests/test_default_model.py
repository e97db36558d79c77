"""The shipped default model: the architecture the issue asks for, a model card, and real training."""

import torch

from conftest import DATA
from viz_model import DEFAULT_MODEL, generate, load_model
from viz_model.training.train import encode, evaluate


def test_shipped_model_architecture_and_size():
    model, tok = load_model()
    cfg = model.cfg
    assert cfg.positional == "sinusoidal" and cfg.norm_placement == "pre" and cfg.causal
    assert cfg.n_ctx >= 256 and 2_000_000 <= model.n_params() <= 10_000_000
    assert DEFAULT_MODEL.stat().st_size <= 25 * 2**20
    assert tok.get_vocab_size() == cfg.d_vocab


def test_model_card_states_data_command_and_result():
    card = DEFAULT_MODEL.with_suffix(".md").read_text(encoding="utf-8")
    for needle in ("TinyStories", "CDLA-Sharing-1.0", "python -m viz_model.training", "bits/character", "Sample"):
        assert needle in card


def test_shipped_model_is_trained_on_english_stories():
    """On the tests' own held-out story (never seen in training) an untrained model scores about
    log2(d_vocab) / chars-per-token ≈ 3 bits/character; the trained one must do far better."""
    model, tok = load_model()
    res = evaluate(model, tok, encode(tok, (DATA / "heldout.txt").read_text(encoding="utf-8")))
    assert res.bits_per_char < 1.5
    ids = tok.encode("Once upon a time, there was a").ids
    steps = generate(model, ids, 12, temperature=0)
    text = tok.decode([s.token_id for s in steps])
    words = text.split()
    assert len(words) >= 5 and sum(w.strip(".,!\"'").isalpha() for w in words) >= len(words) - 1
