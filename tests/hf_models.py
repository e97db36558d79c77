"""Small random `transformers` models built by the tests themselves, saved as Hugging Face folders, for the
parity tests (our conversion vs `transformers` with eager attention on the same weights)."""

from __future__ import annotations

from pathlib import Path

import torch

transformers = __import__("pytest").importorskip("transformers")  # in requirements-dev; parity needs it


def randomise(model, seed: int, std: float = 0.15):
    """Replace every parameter with N(0, std) (norm weights 1 + N(0, std)) so that attention is far from
    uniform and a dropped or transposed term shows in the numbers."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * std
            p.copy_(1.0 + noise if "norm" in name.lower() and name.endswith("weight") else noise)
    return model.eval()


def build(cls_name: str, config, seed: int = 0):
    """A ``transformers`` model of class ``cls_name`` with eager attention and random weights."""
    config._attn_implementation = "eager"
    model = getattr(transformers, cls_name)(config)
    return randomise(model, seed)


def save(model, folder: Path) -> Path:
    model.save_pretrained(folder)
    return folder


def reference(model, ids: torch.Tensor, **kwargs):
    """``transformers`` outputs with every attention pattern and hidden state."""
    with torch.no_grad():
        return model(ids, output_attentions=True, output_hidden_states=True, **kwargs)


def gpt2_config(**kw):
    base = dict(vocab_size=101, n_embd=36, n_layer=2, n_head=3, n_positions=40)
    base.update(kw)
    return transformers.GPT2Config(**base)


def bert_config(**kw):
    base = dict(vocab_size=103, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=50,
                max_position_embeddings=40, type_vocab_size=2)
    base.update(kw)
    return transformers.BertConfig(**base)


def llama_config(cls: str = "LlamaConfig", **kw):
    base = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
                num_key_value_heads=2, max_position_embeddings=64)
    base.update(kw)
    return getattr(transformers, cls)(**base)


def bart_config(**kw):
    base = dict(vocab_size=99, d_model=36, encoder_layers=2, decoder_layers=2, encoder_attention_heads=3,
                decoder_attention_heads=3, encoder_ffn_dim=52, decoder_ffn_dim=52, max_position_embeddings=40)
    base.update(kw)
    return transformers.BartConfig(**base)
