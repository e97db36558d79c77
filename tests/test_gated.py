"""Costly views behind a button (viz_ui/app/gate.py), through Streamlit's AppTest on the shipped model with the threshold
at 0 s (VIZ_GATE_SECONDS=0: every estimate is above it, as on a 1 B model): nothing costly runs as a page opens, a
click computes it and shows the numbers of the direct call, a cancelled run keeps nothing, and the Cause and effect
page offers exact and attribution patching and their correlation."""

from __future__ import annotations


import numpy as np
import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

import viz_ui.app.gated as gated_state
import viz_ui.app.interventions as intervention_state
from conftest import ROOT, plotly_array, shown_figures
from helpers import figure_titled, open_page
from viz_model import ablation, load_model, patching
from viz_ui.app import gate
from viz_ui.analysis.interventions import metric_for

TEXT = "Sue gave Tom a red ball. He said"  # 9 tokens: quick sweeps
MODEL = ROOT / "assets" / "models" / "tinystories-6l.safetensors"


@pytest.fixture(autouse=True)
def gated(monkeypatch):
    """Every view gated; no result left from another test."""
    monkeypatch.setenv("VIZ_GATE_SECONDS", "0")
    st.cache_data.clear()
    yield
    st.cache_data.clear()


@pytest.fixture(scope="module")
def shipped():
    return load_model(MODEL)


def spy(monkeypatch, module, name: str) -> list:
    """Record every call of ``module.name`` (still calling it)."""
    calls, real = [], getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, wrapper)
    return calls


def gate_button(at: AppTest, name: str):
    button = at.button(key=f"gate_{name}")
    assert " — about " in button.label or " — under a second" in button.label, button.label
    return button


def test_gate_words_and_threshold(monkeypatch):
    assert gate.about(0.4) == "under a second" and gate.about(7.2) == "about 7 s" and gate.about(41) == "about 40 s"
    assert gate.about(250) == "about 4 min" and gate.about(3 * 3600) == "about 3.0 h"
    monkeypatch.setenv("VIZ_GATE_SECONDS", "nonsense")
    assert gate.gate_seconds() == gate.GATE_SECONDS
    monkeypatch.setenv("VIZ_GATE_SECONDS", "2.5")
    assert gate.gate_seconds() == 2.5
    assert [gate.length_bucket(n) for n in (1, 9, 64, 65)] == [8, 16, 64, 128]


def test_combined_progress_counts_every_part():
    seen = []

    def part(cells):
        def run(progress):
            for done in range(1, cells + 1):
                if progress:
                    progress(done, cells)
            return cells
        return run
    assert gate.combine([(3, part(3)), (5, part(5))])(lambda d, t: seen.append((d, t))) == [3, 5]
    assert seen[-1] == (8, 8) and all(t == 8 for _, t in seen) and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_effect_map_waits_for_its_button_then_shows_the_direct_numbers(monkeypatch, shipped):
    calls = spy(monkeypatch, intervention_state, "head_effects")
    at = open_page("pages/interventions.py", query={"text": TEXT}, start=False, timeout=300)
    assert calls == [] and figure_titled(at, "Each head switched off") is None
    button = gate_button(at, "head_effects")
    assert button.label.startswith("Compute the per-head effect map")
    button.click().run()
    assert not at.exception and len(calls) == 1
    fig = figure_titled(at, "Each head switched off")
    model, tok = shipped
    ids = torch.tensor([tok.encode(TEXT).ids])
    token = int(at.selectbox(key="token").value)
    expected = ablation.head_ablation_effects(model, ids, token, ids.shape[1] - 1).numpy()
    np.testing.assert_allclose(plotly_array(fig["data"][0]["z"]), expected, atol=1e-5)
    at.run()  # a rerun reads the cache: no second computation, no button
    assert len(calls) == 1 and figure_titled(at, "Each head switched off") is not None
    assert not [b for b in at.button if b.key == "gate_head_effects"]


def test_a_cancelled_run_keeps_nothing_and_says_so(monkeypatch):
    def stopped(*args):  # what Streamlit does when Cancel is clicked: the script stops at the next progress update
        args[-1](1, 48)
        st.stop()
    monkeypatch.setattr(intervention_state, "head_effects", stopped)
    at = open_page("pages/interventions.py", query={"text": TEXT}, start=False, timeout=300)
    gate_button(at, "head_effects").click().run()
    assert figure_titled(at, "Each head switched off") is None
    monkeypatch.undo()
    monkeypatch.setenv("VIZ_GATE_SECONDS", "0")
    calls = spy(monkeypatch, intervention_state, "head_effects")
    at.run()
    assert any("cancelled" in w.value for w in at.warning), [w.value for w in at.warning]
    assert calls == [] and figure_titled(at, "Each head switched off") is None  # nothing was cached
    gate_button(at, "head_effects").click().run()
    assert len(calls) == 1 and figure_titled(at, "Each head switched off") is not None
    assert not any("cancelled" in w.value for w in at.warning)


def test_patching_exact_then_attribution_and_their_correlation(monkeypatch, shipped):
    search = spy(monkeypatch, intervention_state, "default_corruption")
    sweeps = spy(monkeypatch, intervention_state, "patching_sweep")
    at = open_page("pages/interventions.py", query={"text": TEXT, "part": "patching"}, start=False, timeout=300)
    assert search == [] and sweeps == []
    gate_button(at, "corruption")  # the search for the edit waits too; the text starts with a same-length edit
    corrupted = at.text_area(key="corrupt").value
    assert corrupted != TEXT
    method = at.radio(key="patch_method")
    assert method.value == "exact" and list(method.options) == [
        o for o in method.options if o.startswith(("exact", "attribution"))] and len(method.options) == 2
    gate_button(at, "patching_exact").click().run()
    assert not at.exception and len(sweeps) == 4
    model, tok = shipped
    clean, bad = torch.tensor([tok.encode(TEXT).ids]), torch.tensor([tok.encode(corrupted).ids])
    answer, wrong, pos = int(at.selectbox(key="answer").value), int(at.selectbox(key="wrong").value), clean.shape[1] - 1
    metric = metric_for("logit_diff", answer, wrong, pos)
    with torch.no_grad():
        clean_value, bad_value = float(metric(model(clean))), float(metric(model(bad)))
    _, cache = model.run_with_cache(clean)
    exact = patching.normalise(patching.get_act_patch_resid_pre(model, bad, cache, metric), clean_value, bad_value)
    np.testing.assert_allclose(plotly_array(figure_titled(at, "Patching the residual stream")["data"][0]["z"]), exact,
                               atol=1e-4)
    assert not [m for m in at.markdown if "Pearson's r per map" in m.value]
    at.radio(key="patch_method").set_value("attribution").run()
    assert len(sweeps) == 4 and figure_titled(at, "Patching the residual stream") is None  # its own button
    gate_button(at, "patching_attribution").click().run()
    assert not at.exception and len(sweeps) == 8
    attr = patching.normalise(patching.get_attr_patch_resid_pre(model, bad, cache, metric), clean_value, bad_value)
    shown = plotly_array(figure_titled(at, "Attribution estimate: the residual stream")["data"][0]["z"])
    np.testing.assert_allclose(shown, attr.detach().numpy(), atol=1e-4)
    said = next(m.value for m in at.markdown if "Pearson's r per map" in m.value)
    r = np.corrcoef(exact.numpy().ravel(), attr.detach().numpy().ravel())[0, 1]
    assert f"**resid_pre** {r:.2f}" in said
    assert figure_titled(at, "Each cell: exact (x) vs attribution") is not None


def test_attribution_is_the_default_for_a_large_model(monkeypatch):
    monkeypatch.setattr(intervention_state, "ATTRIBUTION_PARAMS", 1000)  # the shipped model counts as large
    at = open_page("pages/interventions.py", query={"text": TEXT, "part": "patching"}, start=False, timeout=300)
    assert at.radio(key="patch_method").value == "attribution"


@pytest.mark.parametrize("page, name, module, function, title", [
    ("pages/heads.py", "repeated_scores", gated_state, "repeated_head_scores", "induction score"),
    ("pages/logit_lens.py", "logit_lens", gated_state, "logit_lens", None),
    ("pages/embeddings.py", "embedding_pca", gated_state, "fit_pca", "Token embeddings in PCA"),
    ("pages/inspector.py", "weight_stats", gated_state, "weight_stats", "std of each weight matrix"),
])
def test_other_pages_wait_for_their_button(monkeypatch, page, name, module, function, title):
    calls = spy(monkeypatch, module, function)
    at = open_page(page, query={"text": TEXT}, start=False, timeout=300)
    assert calls == []
    charts = len(shown_figures(at))
    gate_button(at, name).click().run()
    assert not at.exception and len(calls) == 1
    assert len(shown_figures(at)) > charts
    if title:
        assert figure_titled(at, title) is not None


def test_a_moe_intervention_waits_for_its_button(monkeypatch):
    calls = spy(monkeypatch, gated_state, "run_with_routing")  # the name the gated run calls
    at = open_page("pages/moe.py", query={"text": TEXT, "model": "tinystories-moe"}, start=False, timeout=300)
    assert calls == [] and figure_titled(at, "Output ") is None
    gate_button(at, "moe_intervention").click().run()
    assert not at.exception and len(calls) == 1 and figure_titled(at, "Output ") is not None


def test_sessions_asking_at_once_compute_the_speed_probe_and_a_result_once(monkeypatch, shipped):
    """A class opens a page at once: 6 sessions (threads) ask for the same speed and the same gated result; each is
    computed by one of them while the others wait, then read (was: every session computed both, concurrently)."""
    import threading
    import time

    probes, computes = [], []

    def slow_probe(model, n_tokens, batch=gate.PROBE_BATCH):
        probes.append(n_tokens)
        time.sleep(0.2)
        return 0.001 * len(probes)

    def compute(progress):
        computes.append(1)
        time.sleep(0.2)
        return {"n": len(computes)}

    monkeypatch.setattr(gate, "probe_seconds", slow_probe)
    gate._speeds.clear()
    speeds, results = [], []

    def session():
        speeds.append(gate.copy_seconds(shipped[0], "a-model-key", 9, trace_seconds=None))
        results.append(gate.costly("once", ("a-model-key", TEXT), 0.0, compute, "Compute it"))

    threads = [threading.Thread(target=session) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gate._speeds.clear()
    assert len(probes) == 1 and speeds == [0.001] * 6
    assert len(computes) == 1 and results == [{"n": 1}] * 6
