"""Attribution graphs on two more families: a GPT-2-style and a Llama-style checkpoint (grouped-query attention,
rotary positions, RMSNorm, SwiGLU), each with transcoders trained in the app (the Features page's background job),
then drawn by the Circuits page."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import component_data
from helpers import open_with_model
from viz_model import load_model
from viz_model.circuits import attribute, graph_scores, load_transcoders
from viz_model.features.job import DictionaryJob, DictSettings
from viz_ui.app.features import SESSION_SETS

transformers = pytest.importorskip("transformers")
from hf_models import build, gpt2_config, llama_config, save  # noqa: E402


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_transcoders_trained_in_the_app_give_attribution_graphs(tmp_path, tokenizer, corpus, kind, monkeypatch):
    if kind == "gpt2":
        ref = build("GPT2LMHeadModel", gpt2_config(vocab_size=320, n_positions=160, n_layer=2))
    else:
        ref = build("LlamaForCausalLM", llama_config(vocab_size=320, max_position_embeddings=160))
    model, _ = load_model(save(ref, tmp_path / kind))
    settings = DictSettings(layers=tuple(range(model.cfg.n_layers)), kind="transcoder", d_sae=96, k=6, steps=60,
                            batch_size=256)
    job = DictionaryJob(corpus, settings, model=model, tokenizer=tokenizer, folder=tmp_path / "set", threads=1)
    job.start().wait(600)
    progress = job.progress()
    assert progress.status == "done", progress
    assert progress.written == [f"blocks.{l}.ln2.hook_normalized" for l in range(model.cfg.n_layers)]
    tcs = load_transcoders(tmp_path / "set")
    assert all(tc.hook_name_out == f"blocks.{l}.hook_mlp_out" for l, tc in tcs.items())
    ids = torch.tensor(tokenizer.encode("The cat sat on the mat. The cat").ids)
    graph = attribute(model, ids, tcs)
    replacement, completeness = graph_scores(graph)
    assert 0 <= replacement <= 1 and 0 <= completeness <= 1 and torch.isfinite(graph.adjacency).all()
    assert graph.n_features > 0 and graph.adjacency[graph.logit_start:].abs().sum() > 0
    # the set joins the session's sets, and the Circuits page draws the graph with it
    monkeypatch.setenv("VIZ_GATE_SECONDS", "inf")
    name = f"tiny-{kind}"
    at = open_with_model({name: (model, tokenizer)}, name, "pages/circuits.py", text="The cat sat on the mat. The cat")
    assert not at.exception
    sets = {f"upload:{name}": {"trained transcoders": tuple(str(f) for f in job.folders())}}
    at.session_state[SESSION_SETS] = sets
    at.run()
    payload = json.loads(component_data(at, "circuit_graph")["payload"])
    assert payload["mode"] == "attribution" and payload["n_layers"] == model.cfg.n_layers
    shown = next(m.value for m in at.metric if m.label == "Replacement score")
    assert shown == f"{replacement:.3f}"
