"""A model whose every string a page may show is hostile Markdown or HTML (issue 51, item 6): its tokenizer's tokens,
its name, its predictions, its text, its dictionary's top contexts. Shared by the AppTest and the browser tests of
``test_hostile_pages.py``.

Each hostile token is an image, a link, a script, a formula, an icon or a format in Markdown, HTML or Plotly's
subset of HTML; images and links point at ``127.0.0.1:9`` (the discard port: nothing listens), so that a browser test
can tell any request for them. A page that shows one of them must show its text literally.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer

from conftest import small_model
from viz_model.features import save_dictionary
from viz_model.features.dictionary import SparseDictionary
from viz_model.features.index import build_index, save_corpus, save_index
from viz_model.features.train import collect_activations, token_windows

TRAP = "127.0.0.1:9"  # the discard port: a request there is a request that a hostile string made
HOSTILE = [
    f"![x](http://{TRAP}/md.png)",  # a Markdown image: every viewer's browser would fetch it
    f"<img/src=http://{TRAP}/html.png>",  # an HTML image without spaces (a token's spaces are drawn as ·)
    "<img/src/onerror=alert(1)>",
    "<img src=x onerror=alert(1)>",
    "[link](javascript:alert(1))",  # a Markdown link
    f"<a/href=http://{TRAP}/a>a</a>",  # an HTML link (Plotly draws <a href> too)
    "**bold**",
    "$x^2$",  # KaTeX in Streamlit's Markdown
    "<b>",  # Plotly's bold
    "<s>",  # Plotly's strike-through (and Llama's first token)
    ":material/home:",  # Streamlit's icon directive
    "&lt;b&gt;",  # an entity: shown as written, not as <b>
]
MODEL_NAME = f"![m](http://{TRAP}/name.png) **model** <b>b</b> $y$ :material/star:"
TEXT = "Once upon a time " + "".join(HOSTILE) + " the end " + HOSTILE[0]  # the last token: what pages predict after
HOOK = "blocks.1.hook_resid_post"


def hostile_tokenizer(base: Tokenizer) -> Tokenizer:
    """``base`` (the tests' byte-level BPE) with every :data:`HOSTILE` string added as a token of its own."""
    tok = Tokenizer.from_str(base.to_str())
    tok.add_tokens([AddedToken(t, normalized=False) for t in HOSTILE])
    return tok


def hostile_ids(tok: Tokenizer) -> list[int]:
    return [tok.token_to_id(t) for t in HOSTILE]


KINDS = {  # the model families whose pages differ: a decoder, a mixture of experts, an encoder-decoder
    "decoder": {},
    "moe": {"n_experts": 4, "experts_per_token": 2},
    "seq2seq": {"n_encoder_layers": 2, "mlp": "relu", "decoder_start_id": 1, "decoder_end_id": 2},
}


def hostile_model(tok: Tokenizer, kind: str = "decoder"):
    """A small random model (``kind``: one of :data:`KINDS`) over ``tok``'s vocabulary whose unembedding bias makes
    the hostile tokens its most likely predictions everywhere (so that top-k tables, bars, the logit lens and
    generations show them)."""
    model = small_model(d_vocab=tok.get_vocab_size(), tied_embeddings=False, unembed_bias=True, n_ctx=128,
                        **KINDS[kind])
    with torch.no_grad():
        model.b_U[hostile_ids(tok)] += 6.0
    return model.eval()


def dictionary_set(model, tok: Tokenizer, folder: Path, corpus: str) -> Path:
    """A TopK SAE on :data:`HOOK` with a top-context index on ``corpus`` + the hostile text (so that the hostile
    tokens are among its contexts), written in the upload's layout; returns the dictionary's folder."""
    d = SparseDictionary(model.cfg.d_model, 32, HOOK, "topk", 4)
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for p in d.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    out = save_dictionary(d, folder / HOOK)
    ids = (tok.encode(TEXT + " ").ids * 4 + tok.encode(corpus[:4000]).ids)
    windows = token_windows(ids, 32)[:16]
    acts = collect_activations(model, windows, [HOOK])[HOOK]
    with torch.no_grad():
        f = d.encode(acts).view(len(windows), 32, 32)
    save_index(build_index(f, context=24, lead=19), out)
    save_corpus(windows, folder)
    return out
