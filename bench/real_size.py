"""The app at a real size: a Llama-3.2-1B-shaped model (1.24 B parameters, random weights), side by side with
``transformers`` (eager) on the same weights. Not a test: prints a table.

    python bench/real_size.py build [--out /work/models/llama-1b]     # write the checkpoint once (~2.4 GB bf16)
    python bench/real_size.py [--only load,forward,trace,typing,ablate,sweeps] [--model DIR]

Every 1 B process runs alone (ours, then transformers', in fresh subprocesses one after the other): a float32
1 B model takes ~5 GB. The loader's cap (``VIZ_MAX_MODEL_MB``) is raised to 20,000 MB for the children.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = Path("/work/models/llama-1b")
DATA = Path("/work/shared/data/tinystories-train-head.txt")
MARKER = ".complete"  # written last: a folder without it is half-written
TOKENIZER_VOCAB = 8_000  # the tokenizer's own vocabulary (the model keeps Llama 3's 128,256 rows)

LLAMA_1B = dict(
    hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
    intermediate_size=8192, vocab_size=128_256, tie_word_embeddings=True, rope_theta=500_000.0,
    rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=8192),
    max_position_embeddings=131_072, rms_norm_eps=1e-5, hidden_act="silu", bos_token_id=1, eos_token_id=2,
)


# ------------------------------------------------------------------------------------------------- build


def train_tokenizer(path: Path, vocab: int = TOKENIZER_VOCAB):
    """A byte-level BPE (GPT-2 / Llama 3 style pre-tokenizer) trained on the TinyStories head, ``vocab`` tokens
    with ``<unk>``, ``<s>``, ``</s>`` as ids 0, 1, 2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([str(path)], trainer)
    return tok


def build(out: Path, seed: int = 0, std: float = 0.02) -> None:
    """Write a Llama-3.2-1B-shaped Hugging Face folder to ``out``: config.json, model.safetensors (bf16, every
    matrix normal(0, ``std``), norms 1; the embedding is tied, so no lm_head), tokenizer.json, then the marker
    ``.complete``. The model is built on the meta device (no init) and each tensor drawn in bf16 chunks."""
    import torch
    import transformers
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).unlink(missing_ok=True)
    config = transformers.LlamaConfig(**LLAMA_1B, dtype="bfloat16")
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    state = {}
    t0 = time.perf_counter()
    for name, p in model.state_dict().items():
        if name == "lm_head.weight":  # tied to model.embed_tokens.weight
            continue
        if name.endswith("norm.weight"):
            state[name] = torch.ones(p.shape, dtype=torch.bfloat16)
            continue
        t = torch.empty(p.shape, dtype=torch.bfloat16)
        flat = t.view(-1)
        step = 1 << 24
        for i in range(0, flat.numel(), step):  # float32 draws in 64 MB chunks
            n = min(step, flat.numel() - i)
            flat[i:i + n] = torch.randn(n, generator=gen) * std
        state[name] = t
    n_params = sum(t.numel() for t in state.values())
    print(f"drew {n_params / 1e9:.3f} B parameters in {time.perf_counter() - t0:.0f} s", flush=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)
    train_tokenizer(DATA).save(str(out / "tokenizer.json"))
    (out / MARKER).write_text(json.dumps({"params": n_params, "seed": seed, "std": std}) + "\n")
    size = (out / "model.safetensors").stat().st_size
    print(f"wrote {out} ({size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", nargs="?", default="bench", choices=["build", "bench"])
    parser.add_argument("--out", "--model", dest="out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.step == "build":
        build(args.out)


if __name__ == "__main__":
    main()
