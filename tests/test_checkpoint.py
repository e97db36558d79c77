"""Native checkpoints: round trip, and a one-line message for every kind of bad file."""

import json

import pytest
import torch
from safetensors.torch import save_file

from conftest import small_model
from viz_model import CheckpointError, load_model, save_checkpoint
from viz_model.loading.checkpoint import read_metadata


def test_save_then_load_gives_identical_logits_and_tokenizer(tmp_path, tokenizer):
    for overrides in ({}, {"positional": "learned", "tied_embeddings": False, "norm_placement": "post"}):
        model = small_model(seed=3, **overrides)
        path = save_checkpoint(model, tokenizer, tmp_path / "m.safetensors", {"note": "hello"})
        loaded, tok = load_model(path)
        x = torch.tensor([tokenizer.encode("Max saw a red ball.").ids])
        assert torch.equal(loaded(x), model(x))
        assert loaded.cfg == model.cfg
        assert tok.encode("Max saw a red ball.").ids == tokenizer.encode("Max saw a red ball.").ids
        assert read_metadata(path)["note"] == "hello"


def _write(tmp_path, tokenizer, mutate):
    model = small_model()
    tensors = {k: v.clone() for k, v in model.state_dict().items()}
    meta = {"format": "viz-transformer", "config": model.cfg.to_json(), "tokenizer": tokenizer.to_str()}
    mutate(tensors, meta)
    path = tmp_path / "bad.safetensors"
    save_file(tensors, str(path), metadata=meta)
    return path


@pytest.mark.parametrize("mutate, message", [
    (lambda t, m: t.__setitem__("embed.W_E", torch.zeros(7, 32)), "has shape"),
    (lambda t, m: t["blocks.0.attn.W_Q"].__setitem__((0, 0, 0), float("nan")), "NaN"),
    (lambda t, m: t["embed.W_E"].__setitem__((-1, -1), float("inf")), "NaN or infinite"),
    (lambda t, m: t["blocks.1.mlp.W_out"].__setitem__((3, 5), float("-inf")), "NaN or infinite"),
    (lambda t, m: t.__setitem__("blocks.0.attn.W_K", t["blocks.0.attn.W_K"].bfloat16().index_put_(
        (torch.tensor([1]), torch.tensor([2]), torch.tensor([3])), torch.tensor(float("nan")).bfloat16())), "W_K holds NaN"),
    (lambda t, m: t.pop("blocks.1.mlp.W_in"), "missing"),
    (lambda t, m: t.__setitem__("extra.weight", torch.zeros(2)), "unexpected"),
    (lambda t, m: m.pop("format"), "not a viz-transformer"),
    (lambda t, m: m.__setitem__("config", "{not json"), "not valid JSON"),
    (lambda t, m: m.__setitem__("config", json.dumps({"n_layers": 2})), "incomplete"),
    (lambda t, m: m.__setitem__("tokenizer", "garbage"), "tokenizer"),
])
def test_bad_checkpoints_give_a_one_line_message(tmp_path, tokenizer, mutate, message):
    path = _write(tmp_path, tokenizer, mutate)
    with pytest.raises(CheckpointError, match=message) as info:
        load_model(path)
    assert "\n" not in str(info.value)


def test_empty_truncated_and_missing_files(tmp_path, tokenizer):
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty"):
        load_model(empty)
    good = save_checkpoint(small_model(), tokenizer, tmp_path / "good.safetensors")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CheckpointError):
        load_model(cut)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError, match="not a readable"):
        load_model(junk)
    with pytest.raises(CheckpointError, match="no such file"):
        load_model(tmp_path / "absent.safetensors")
