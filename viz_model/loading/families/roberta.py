"""RoBERTa (Hugging Face ``model_type: roberta``; Liu et al., 2019): BERT's post-LN encoder and masked-LM head under
other names (``roberta.``, ``lm_head.dense`` / ``layer_norm`` / ``decoder``), converted by renaming into BERT's and
reusing :mod:`viz_model.loading.families.bert`.

Positions are counted after the padding id: a text without padding takes rows ``pad_token_id + 1, + 2, ...`` of
``position_embeddings`` (transformers' ``create_position_ids_from_input_ids``), so the table is read from row
``pad_token_id + 1`` on and ``n_ctx`` is ``max_position_embeddings - pad_token_id - 1`` (514 - 2 = 512 for
roberta-base). A padding token inside a text takes row ``pad_token_id`` and the tokens after it keep counting
from where they were (``cumsum(ids != pad) * (ids != pad) + pad``): config switch ``position_pad_id``, that row
kept as ``pos_embed.W_pos_pad``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

import dataclasses

from viz_model.config import Config
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families import bert
from viz_model.loading.families.common import opt_int, require_int

RENAMES = (("roberta.", "bert."), ("lm_head.dense.", "cls.predictions.transform.dense."),
           ("lm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
           ("lm_head.decoder.", "cls.predictions.decoder."), ("lm_head.bias", "cls.predictions.bias"))


def _bert_config(hf: dict, label: str) -> dict:
    """The ``config.json`` as BERT's: the context shortened by the rows before the first position."""
    first = opt_int(hf, "pad_token_id", 1, label) + 1
    n_pos = require_int(hf, "max_position_embeddings", label)
    if not 0 < first < n_pos:
        raise CheckpointError(f"{label}: pad_token_id ({first - 1}) leaves no position rows of {n_pos}")
    return {**hf, "max_position_embeddings": n_pos - first}


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a RoBERTa ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.loading.families.bert.config_from_hf`; a pad id beyond the position table.
    """
    cfg = bert.config_from_hf(_bert_config(hf, label), label)
    return dataclasses.replace(cfg, family="roberta", position_pad_id=opt_int(hf, "pad_token_id", 1, label))


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``RobertaModel`` or ``RobertaForMaskedLM`` weights.

    Raises:
        CheckpointError: as :func:`config_from_hf`; missing or mis-shaped weights.
    """
    first = opt_int(hf, "pad_token_id", 1, label) + 1
    renamed = {}
    for key, value in state.items():
        if isinstance(key, str):
            for theirs, ours in RENAMES:
                if key.startswith(theirs):
                    key = ours + key[len(theirs):]
                    break
        renamed[key] = value
    pos = "bert.embeddings.position_embeddings.weight"
    table = renamed.get(pos)
    if isinstance(table, torch.Tensor) and table.ndim == 2:
        renamed[pos] = table[first:]
    cfg, out = bert.from_hf(_bert_config(hf, label), renamed, label)
    cfg = check_config(dataclasses.replace(cfg, family="roberta", position_pad_id=first - 1), label)
    out["pos_embed.W_pos_pad"] = table[first - 1]  # the padding row (a view: build_model lays it out)
    return cfg, out
