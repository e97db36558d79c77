"""The encoder-decoder: hook shapes of the three attention kinds, masks, cross-attention recomputed from the
weights, KV-cache generation, the date data, training on pairs, and the generate command."""

from __future__ import annotations

import datetime
import math
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, small_config
from viz_model import VizTransformer, load_model
from viz_model.training.dates import FORMATS, is_held_out, ordinal, sample_pairs, write_date


def seq2seq_model(placement: str = "post", seed: int = 0) -> VizTransformer:
    cfg = small_config(n_encoder_layers=3, norm_placement=placement, final_norm=placement == "pre", mlp="relu",
                       decoder_start_id=1, decoder_end_id=2)
    model = VizTransformer(cfg)
    model.init_weights(seed=seed)
    with torch.no_grad():  # sharper attention than the init's, so that mistakes show
        for name, p in model.named_parameters():
            if name.rsplit(".", 1)[-1] in ("W_Q", "W_K"):
                p.mul_(8)
    return model.eval()


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_three_attention_kinds_have_their_shapes_and_masks(placement):
    model = seq2seq_model(placement)
    cfg = model.cfg
    src, tgt = torch.randint(0, cfg.d_vocab, (2, 9)), torch.randint(0, cfg.d_vocab, (2, 6))
    logits, cache = model.run_with_cache(tgt, src_tokens=src)
    assert logits.shape == (2, 6, cfg.d_vocab)
    enc = cache["encoder.blocks.2.attn.hook_pattern"]
    dec = cache["blocks.1.attn.hook_pattern"]
    cross = cache["blocks.1.cross_attn.hook_pattern"]
    assert enc.shape == (2, cfg.n_heads, 9, 9) and dec.shape == (2, cfg.n_heads, 6, 6)
    assert cross.shape == (2, cfg.n_heads, 6, 9)  # query_pos over the target, key_pos over the source
    assert cache["blocks.0.cross_attn.hook_k"].shape == (2, 9, cfg.n_heads, cfg.d_head)
    for p in (enc, dec, cross):
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]))
    assert torch.triu(dec, 1).abs().max() == 0  # the decoder is causal
    assert torch.triu(enc, 1).sum() > 0.1 and torch.triu(cross, 1).sum() > 0.1  # the others are not
    assert torch.isinf(cache["blocks.0.attn.hook_attn_scores"]).any()
    assert not torch.isinf(cache["blocks.0.cross_attn.hook_attn_scores"]).any()


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_cross_attention_recomputed_from_the_weights(placement):
    model = seq2seq_model(placement, seed=3)
    cfg, block = model.cfg, model.blocks[1]
    src, tgt = torch.randint(0, cfg.d_vocab, (1, 7)), torch.randint(0, cfg.d_vocab, (1, 5))
    _, cache = model.run_with_cache(tgt, src_tokens=src)
    enc_out = model.encode(src)[0]  # what every decoder block's cross-attention reads
    if placement == "pre":
        x = cache["blocks.1.ln_cross.hook_normalized"][0]
        resid_in = cache["blocks.1.hook_resid_mid"][0]
    else:
        x = cache["blocks.1.hook_resid_mid"][0]
        resid_in = x
    a = block.cross_attn
    with torch.no_grad():
        for h in range(cfg.n_heads):
            q = x @ a.W_Q[h] + a.b_Q[h]
            k = enc_out @ a.W_K[h] + a.b_K[h]
            v = enc_out @ a.W_V[h] + a.b_V[h]
            w = torch.softmax(q @ k.T / math.sqrt(cfg.d_head), -1)
            torch.testing.assert_close(cache["blocks.1.cross_attn.hook_pattern"][0, h], w, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(cache["blocks.1.cross_attn.hook_z"][0, :, h], w @ v, atol=1e-5, rtol=1e-4)
        out = torch.einsum("qhk,hkd->qd", cache["blocks.1.cross_attn.hook_z"][0], a.W_O) + a.b_O
        torch.testing.assert_close(cache["blocks.1.hook_cross_attn_out"][0], out, atol=1e-5, rtol=1e-4)
        mid_cross = resid_in + out if placement == "pre" else block.ln_cross(resid_in + out)
        torch.testing.assert_close(cache["blocks.1.hook_resid_mid_cross"][0], mid_cross, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_generation_with_kv_cache_matches_full_runs(placement):
    from viz_model import generate
    model = seq2seq_model(placement, seed=5)
    src = torch.randint(3, model.cfg.d_vocab, (1, 8))
    steps = generate(model, [1], 10, temperature=0.0, src_ids=src[0].tolist())
    ids = [1]
    for step in steps:  # each step's greedy token equals the argmax of a full, uncached run
        full = model(torch.tensor([ids]), src_tokens=src)[0, -1]
        assert int(full.argmax()) == step.token_id
        ids.append(step.token_id)
    with pytest.raises(ValueError, match="source"):
        generate(model, [1], 3, src_ids=[])


def test_dates_are_written_correctly_and_held_out_dates_never_train():
    d = datetime.date(2021, 3, 3)
    written = {write_date(d, f) for f in FORMATS}
    assert written == {"3 March 2021", "3 Mar 2021", "March 3, 2021", "Mar 3rd 2021", "Wednesday, March 3, 2021",
                       "3rd of March 2021"}
    assert write_date(datetime.date(1900, 1, 1), "Weekday, Month D, YYYY", lower=True) == "monday, january 1, 1900"
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st"]
    train, held = sample_pairs(3000, 0), sample_pairs(300, 1, held_out=True)
    assert not {t for _, t in train} & {t for _, t in held}
    assert all(is_held_out(datetime.date.fromisoformat(t)) for _, t in held)
    years = [int(t[:4]) for _, t in train]
    assert min(years) >= 1900 and max(years) <= 2099 and max(years) - min(years) > 150
    assert any(s.islower() for s, _ in train) and any(s[0].isupper() for s, _ in train)


def test_training_on_pairs_learns_and_saves_an_encoder_decoder(tmp_path):
    from viz_model.training.train import main
    out = tmp_path / "dates.safetensors"
    acc = main(["--task", "dates", "--out", str(out), "--n-layers", "1", "--n-encoder-layers", "1", "--d-model", "32",
                "--n-heads", "2", "--steps", "60", "--batch-size", "16", "--n-pairs", "2000", "--eval-pairs", "50",
                "--eval-every", "0", "--vocab-size", "259", "--mlp", "relu", "--norm-placement", "post"])
    model, tok = load_model(out)
    assert model.cfg.is_encoder_decoder and model.cfg.n_encoder_layers == 1 and 0.0 <= acc <= 1.0
    assert tok.id_to_token(model.cfg.decoder_start_id) == "<s>" and tok.id_to_token(model.cfg.decoder_end_id) == "</s>"
    # a TSV of word reversals: the held-out 5 % repeat training pairs, so a model that learns gets them right
    pairs = tmp_path / "pairs.tsv"
    words = ("cat", "dog", "bird", "fish", "horse")
    pairs.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words * 16) + "a much longer source than any other\tx\n",
                     encoding="utf-8")
    acc = main(["--pairs", str(pairs), "--out", str(tmp_path / "rev.safetensors"), "--n-layers", "1", "--d-model", "32",
                "--n-heads", "2", "--steps", "300", "--batch-size", "8", "--eval-every", "0", "--vocab-size", "259",
                "--lr", "3e-3", "--warmup", "10", "--n-encoder-layers", "1"])
    model, tok = load_model(tmp_path / "rev.safetensors")
    assert model.cfg.is_encoder_decoder and acc >= 0.75
    from viz_model.seq2seq import translate
    assert translate(model, tok, "horse")[0] == "esroh"


def test_generate_command_prints_one_line_per_input(tmp_path):
    run = subprocess.run([sys.executable, "-m", "viz_model.generate", "--n-new", "5", "Once upon a time", "The dog"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.splitlines()) == 2
    bad = subprocess.run([sys.executable, "-m", "viz_model.generate", "--model", str(tmp_path / "nope.pt"), "x"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no such file" in bad.stderr
