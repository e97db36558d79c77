"""The only Streamlit caching glue: models per path, traces per (model, text)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import streamlit as st
from tokenizers import Tokenizer

from viz_model import DEFAULT_MODEL, VizTransformer, load_model
from viz_model.checkpoint import ASSETS

from .block import logit_lens
from .heads import head_scores
from .numeric import PCA, fit_pca
from .trace import Trace, run_trace, token_label


def shipped_models() -> dict[str, str]:
    """Names (file stems) and paths of the models in ``assets/models``, the default model first."""
    paths = sorted(ASSETS.glob("*.safetensors"), key=lambda p: (p != DEFAULT_MODEL, p.name))
    return {p.stem: str(p) for p in paths}


@st.cache_resource(max_entries=4, show_spinner="Loading the model…")
def get_model(path: str) -> tuple[VizTransformer, Tokenizer]:
    """The model and tokenizer stored at ``path``, loaded once per server process."""
    return load_model(path)


@st.cache_data(max_entries=64, show_spinner="Running the model…")
def get_trace(path: str, text: str) -> Trace:
    """Every hook of one forward pass of the model at ``path`` over ``text`` (see :func:`run_trace`)."""
    model, tokenizer = get_model(path)
    return run_trace(model, tokenizer, text)


@st.cache_data(max_entries=4, show_spinner=False)
def get_vocab_labels(path: str) -> list[str]:
    """Display labels of every token id of the model's vocabulary, ``[d_vocab]``."""
    model, tokenizer = get_model(path)
    return [token_label(tokenizer, i) for i in range(model.cfg.d_vocab)]


@st.cache_data(max_entries=4, show_spinner="Projecting the vocabulary…")
def get_embedding_pca(path: str) -> tuple[PCA, np.ndarray]:
    """PCA (3 components) fitted on the whole token-embedding matrix W_E ``[d_vocab, d_model]``,
    and the vocabulary's coordinates ``[d_vocab, 3]``."""
    model, _ = get_model(path)
    w_e = model.embed.W_E.detach().float().numpy()
    pca = fit_pca(w_e, 3)
    return pca, pca.project(w_e)


@st.cache_data(max_entries=4, show_spinner=False)
def get_positional_table(path: str) -> np.ndarray:
    """The model's positional encodings for every position, ``[n_ctx, d_model]`` (its own table or sinusoid)."""
    model, _ = get_model(path)
    return model.pos_embed.W_pos.detach().float().numpy()


@st.cache_data(max_entries=16, show_spinner="Measuring the heads…")
def get_head_scores(path: str, text: str) -> dict[str, np.ndarray]:
    """:func:`head_scores` of the model at ``path`` on ``text`` (and its repeated random sequence)."""
    model, _ = get_model(path)
    return head_scores(model, get_trace(path, text))


@st.cache_data(max_entries=16, show_spinner=False)
def get_logit_lens(path: str, text: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """:func:`logit_lens` of the model at ``path`` on ``text``."""
    model, _ = get_model(path)
    return logit_lens(model, get_trace(path, text))


def model_card(path: str) -> str | None:
    """The Markdown model card next to a shipped model (``NAME.md``), if there is one."""
    card = Path(path).with_suffix(".md")
    return card.read_text(encoding="utf-8") if card.is_file() else None
