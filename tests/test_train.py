"""The training command: it learns, is deterministic, and reports bits per character correctly."""

import math

import pytest
import torch
from safetensors import safe_open

from conftest import DATA
from viz_model import load_model
from viz_model.training.train import cosine_lr, encode, evaluate, main

ARGS = ["--n-layers", "1", "--d-model", "32", "--n-heads", "2", "--n-ctx", "32", "--vocab-size", "300",
        "--batch-size", "8", "--warmup", "5", "--eval-every", "0", "--threads", "1"]


def train(tmp_path, name, steps, *extra):
    out = tmp_path / f"{name}.safetensors"
    res = main(["--corpus", str(DATA / "stories.txt"), "--valid", str(DATA / "heldout.txt"), "--out", str(out),
                "--steps", str(steps), *ARGS, *extra])
    return out, res


def test_a_short_run_lowers_the_validation_loss(tmp_path):
    _, before = train(tmp_path, "zero", 1)
    path, after = train(tmp_path, "short", 150, "--lr", "3e-3")
    assert after.nats_per_token < before.nats_per_token - 1.0
    model, tok = load_model(path)
    again = evaluate(model, tok, encode(tok, (DATA / "heldout.txt").read_text()))
    assert again.nats_per_token == pytest.approx(after.nats_per_token, rel=1e-5)
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    assert "--steps 150" in meta["command"] and float(meta["valid_bits_per_char"]) == pytest.approx(after.bits_per_char, abs=1e-4)


def test_same_seed_same_model_and_snapshots(tmp_path):
    a, _ = train(tmp_path, "a", 12, "--seed", "5", "--snapshot-every", "6")
    b, _ = train(tmp_path, "b", 12, "--seed", "5")
    c, _ = train(tmp_path, "c", 12, "--seed", "6")
    wa, wb, wc = (load_model(p)[0].state_dict() for p in (a, b, c))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    snap = tmp_path / "a.snapshots" / "step_000006.safetensors"
    assert snap.is_file() and load_model(snap)[0].cfg == load_model(a)[0].cfg


def test_bits_per_character_is_nats_per_character_over_ln2(tmp_path):
    path, res = train(tmp_path, "bpc", 3)
    model, tok = load_model(path)
    text = (DATA / "heldout.txt").read_text()
    ids = encode(tok, text)
    logits = model(ids[None, :32])[0, :-1]
    nats = torch.nn.functional.cross_entropy(logits, ids[1:32], reduction="sum").item()
    chars = len(tok.decode(ids[1:32].tolist()))
    one = evaluate(model, tok, ids[:32])
    assert one.bits_per_char == pytest.approx(nats / chars / math.log(2), rel=1e-5)


def test_learning_rate_schedule():
    assert cosine_lr(0, 100, 1.0, 0.1, 10) == pytest.approx(0.1)
    assert cosine_lr(9, 100, 1.0, 0.1, 10) == pytest.approx(1.0)
    assert cosine_lr(100, 100, 1.0, 0.1, 10) == pytest.approx(0.1)


def test_missing_or_empty_corpus_exits_with_a_message(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        main(["--corpus", str(tmp_path / "absent.txt"), "--out", str(tmp_path / "x.safetensors")])
    empty = tmp_path / "empty.txt"
    empty.write_text("   \n")
    with pytest.raises(SystemExit, match="empty"):
        main(["--corpus", str(empty), "--out", str(tmp_path / "x.safetensors")])
