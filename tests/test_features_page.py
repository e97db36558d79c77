"""Issue 24, item 3: the Features page on the shipped model with its shipped dictionaries — the numbers drawn are the
dictionaries' own encodings of the model's activations, the card's readouts match the library, the exported script
prints the same, and a model without dictionaries or with unusable ones gets one line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, plotly_array, shown_figures
from helpers import open_page
from viz_model import load_model, save_checkpoint
from viz_model.features import feature_acts, head_contributions, load_dictionary, promoted_tokens, shipped_dictionaries
from viz_ui.app.features import SESSION_SETS

TEXT = "Once upon a time, there was a little dog named Max. Max loved to play with his red ball in the park."


@pytest.fixture(scope="module")
def shipped():
    model, tokenizer = load_model(ROOT / "assets" / "models" / "tinystories-6l.safetensors")
    folders = {h: f for h, f in shipped_dictionaries("tinystories-6l").items() if h.endswith("hook_resid_post")}
    assert len(folders) == model.cfg.n_layers  # one SAE per layer (the page's first set; the transcoders are another)
    return model, tokenizer, {h: load_dictionary(f) for h, f in folders.items()}


def figure(at, title_start: str) -> dict:
    found = [f for f in shown_figures(at) if f["layout"]["title"]["text"].startswith(title_start)]
    assert found, [f["layout"]["title"]["text"] for f in shown_figures(at)]
    return found[0]


def test_the_page_draws_the_dictionaries_own_features(shipped):
    model, tokenizer, dicts = shipped
    at = open_page("pages/features.py", text=TEXT)
    ids = torch.tensor(tokenizer.encode(TEXT).ids)
    strongest = figure(at, "Strongest feature of each token")
    z = plotly_array(strongest["data"][0]["z"]).astype(float)
    assert z.shape == (len(dicts), len(ids))
    for row, d in enumerate(dicts.values()):
        acts = feature_acts(model, ids, d)  # the library's own path: a fresh forward pass per dictionary
        np.testing.assert_allclose(z[row], acts.max(-1).values.numpy(), rtol=1e-4, atol=1e-4)
        texts = strongest["data"][0]["text"][row]
        assert [int(t[1:]) for t in texts] == acts.argmax(-1).tolist()
    table = at.dataframe[0].value if at.dataframe else at.table[0].value
    assert (table["variance unexplained (FVU)"] < 0.5).all()  # TinyStories text: the dictionaries fit it


def test_the_feature_card_matches_the_library(shipped):
    model, tokenizer, dicts = shipped
    hook = list(dicts)[3]
    d = dicts[hook]
    ids = torch.tensor(tokenizer.encode(TEXT).ids)
    acts = feature_acts(model, ids, d)
    feature = int(acts.max(0).values.argmax())
    at = open_page("pages/features.py", text=TEXT, query={"flayer": "3", "feature": str(feature)})
    assert f"Feature L3 F{feature}" in [h.value for h in at.subheader]
    (up_ids, up), _ = promoted_tokens(model, d, feature, n=8)
    raises = figure(at, f"L3 F{feature} raises the logit of")
    np.testing.assert_allclose(plotly_array(raises["data"][0]["x"]), up.numpy(), rtol=1e-4, atol=1e-5)
    pos = int(acts[:, feature].argmax())
    heads = figure(at, f"Heads whose output at position {pos} adds to L3 F{feature}")
    np.testing.assert_allclose(plotly_array(heads["data"][0]["z"]).astype(float),
                               head_contributions(model, ids, d, feature, pos).numpy(), rtol=1e-4, atol=1e-5)
    assert "Top-activating contexts" in " ".join(m.value for m in at.markdown)


def test_the_exported_script_prints_the_page_numbers(shipped, tmp_path):
    model, tokenizer, dicts = shipped
    at = open_page("pages/features.py", text=TEXT, query={"flayer": "2"})
    code = next(c.value for c in at.code if "load_dictionary" in c.value)
    script = tmp_path / "features.py"
    script.write_text(code, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    strongest = figure(at, "Strongest feature of each token")
    expected = [int(t[1:]) for t in strongest["data"][0]["text"][2]]
    printed = [int(line.split()[-2][1:]) for line in lines if line.split()[0].isdigit()]
    assert printed == expected
    table = at.dataframe[0].value if at.dataframe else at.table[0].value
    fvu = float(next(line for line in lines if line.startswith("FVU")).split()[-1])
    assert abs(fvu - float(table["variance unexplained (FVU)"].iloc[2])) < 2e-3


def test_a_model_without_dictionaries_says_so():
    at = open_page("pages/features.py", query={"model": "tinystories-moe"})
    assert any("No sparse dictionary for tinystories" in i.value and "moe yet" in i.value for i in at.info)
    assert not shown_figures(at)


def test_dictionaries_for_another_width_are_one_line(tmp_path, shipped):
    from viz_model.features import SparseDictionary, save_dictionary
    wrong = SparseDictionary(64, 128, "blocks.0.hook_resid_post", "topk", k=8)  # d_model is 256
    with torch.no_grad():
        for p in wrong.parameters():
            p.normal_()
    folder = save_dictionary(wrong, tmp_path / "blocks.0.hook_resid_post")
    at = open_page()
    path = str(ROOT / "assets" / "models" / "tinystories-6l.safetensors")
    at.session_state[SESSION_SETS] = {path: {"wrong width": (str(folder),)}}
    at.switch_page("pages/features.py").run()
    at.selectbox(key="feature_set").set_value("wrong width").run()
    assert not at.exception
    assert any("cannot be used with this model" in e.value and "\n" not in e.value for e in at.error)
