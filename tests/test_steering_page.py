"""The Steering & feature ablation page on the shipped model, driven through Streamlit's AppTest, with a small
dictionary trained for the test (the page's numbers are compared with direct calls of the library)."""


import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import PAGE_ATOL, ROOT, plotly_array, shown_figures
from helpers import open_page
from viz_model import load_model
from viz_model.features import save_dictionary
from viz_model.features.train import collect_activations, token_windows, train_on_activations
from viz_model.interventions.steering import ablate_features, contrastive_direction, steer

MODEL = ROOT / "assets" / "models" / "tinystories-6l.safetensors"
PAGE = "pages/steering.py"
TEXT = "Once upon a time, there was a little girl named Lily. She liked to"
LAYER = 3
HOOK = f"blocks.{LAYER}.hook_resid_post"


@pytest.fixture(scope="module")
def shipped():
    return load_model(str(MODEL))


@pytest.fixture(scope="module")
def folder(shipped, tmp_path_factory):
    """A 64-feature TopK SAE on layer 3 of the shipped model (one folder, no index: the unit falls back to the text)."""
    model, tokenizer = shipped
    text = (ROOT / "assets" / "texts" / "model-stories.txt").read_text(encoding="utf-8")[:20_000]
    windows = token_windows(tokenizer.encode(text).ids, 64)
    acts = collect_activations(model, windows, [HOOK])[HOOK]
    d, _ = train_on_activations(acts, None, 64, HOOK, "topk", 4, steps=40, batch_size=512)
    out = tmp_path_factory.mktemp("dicts") / HOOK
    save_dictionary(d, out)
    return out


def open_steering(query: dict | None = None, folder=None) -> AppTest:
    state = {"_feature_sets": {str(MODEL): {"test set": (str(folder),)}}} if folder is not None else None
    at = open_page(PAGE, text=TEXT, query=query, session=state, timeout=180)
    if folder is not None:  # the test's set, not the shipped one listed first
        at.selectbox(key="feature_set").set_value("test set").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def continuation(at: AppTest) -> tuple[str, str]:
    block = next(c.value for c in at.code if c.value.startswith("intact :"))
    intact, steered = block.split("\n")
    return intact.removeprefix("intact : "), steered.removeprefix("steered: ")


def bars(at: AppTest, start: str) -> dict:
    spec = next(f for f in shown_figures(at) if f["layout"]["title"]["text"].startswith(start))
    return spec


def test_contrastive_steering(shipped):
    model, tokenizer = shipped
    at = open_steering({"alpha": "0.0", "steer": "contrastive"})
    intact, steered = continuation(at)
    assert intact == steered  # alpha = 0 is the intact model
    at = open_steering({"alpha": "10.0", "steer": "contrastive"})
    intact, steered = continuation(at)
    assert intact != steered
    # the bars' steered probabilities are those of a direct steer() with the page's contrastive direction
    ids = torch.tensor([tokenizer.encode(TEXT).ids])
    a = torch.tensor([tokenizer.encode("Happy, happy, happy. She laughed and smiled.").ids])
    b = torch.tensor([tokenizer.encode("Sad, sad, sad. She cried and frowned.").ids])
    hook = f"blocks.{model.cfg.n_layers // 2}.hook_resid_post"
    direction = contrastive_direction(model, a, b, hook)
    p = torch.softmax(steer(model, ids, hook, direction, 10.0)[0, -1].double(), -1).numpy()
    fig = bars(at, "Next token")
    steered_bar = next(t for t in fig["data"] if t["name"] == "steered")
    shown = plotly_array(steered_bar["x"])
    assert shown.max() == pytest.approx(p.max(), abs=1e-5)  # the steered run's top token is among the bars


def test_feature_steering_and_ablation(shipped, folder):
    model, tokenizer = shipped
    at = open_steering({"alpha": "0.0", "steer": "feature"}, folder)
    intact, steered = continuation(at)
    assert intact == steered
    at = open_steering({"alpha": "10.0", "steer": "feature"}, folder)
    assert continuation(at)[0] != continuation(at)[1]
    # ablation: none switched off = intact (every KL 0); the default features change the output as the library says
    at = open_steering({"spart": "ablate"}, folder)
    select = at.multiselect[0]
    chosen = [int(f) for f in select.value]
    assert chosen, "the text's strongest features are chosen by default"
    from viz_model.features import load_dictionary
    d = load_dictionary(folder)
    ids = torch.tensor([tokenizer.encode(TEXT).ids])
    with torch.no_grad():
        p0 = torch.log_softmax(model(ids)[0].double(), -1)
    p1 = torch.log_softmax(ablate_features(model, ids, d, chosen)[0].double(), -1)
    kl = (p0.exp() * (p0 - p1)).sum(-1).numpy()
    fig = bars(at, "How far the output moved")
    np.testing.assert_allclose(plotly_array(fig["data"][0]["y"]).astype(float), kl, atol=PAGE_ATOL)
    select.set_value([]).run()
    assert not at.exception
    fig = bars(at, "How far the output moved")
    assert np.abs(plotly_array(fig["data"][0]["y"]).astype(float)).max() < 1e-9


def test_dictionaries_trained_in_the_page_join_the_sets_and_steer():
    at = open_steering()
    at.multiselect(key="dict_layers").set_value([1])
    at.selectbox(key="dict_width").set_value(256)
    at.select_slider(key="dict_steps").set_value(50)
    at.button(key="dict_start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    job, path = at.session_state["_dict_job"]
    assert path == str(MODEL)
    assert job.wait(240)
    at.run()  # the page sees the job ended: the set joins this session's sets
    assert not at.exception, [e.value for e in at.exception]
    sets = at.session_state["_feature_sets"][str(MODEL)]
    (label, folders), = sets.items()
    assert label.startswith("trained SAEs: 1 layer, 256 features") and len(folders) == 1
    assert any("is in the dictionary list" in s.value for s in at.success)
    at.radio(key="steer").set_value("feature").run()  # the trained dictionary steers
    assert not at.exception, [e.value for e in at.exception]
    assert any(c.value.startswith("intact :") for c in at.code)


def test_the_exported_scripts_print_the_pages_numbers(folder, capsys):
    at = open_steering({"alpha": "10.0"})
    intact, steered = continuation(at)
    script = next(c.value for c in at.code if c.value.startswith('"""Steering'))
    exec(compile(script, "steering.py", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert f"intact : {intact}" in out and f"steered: {steered}" in out
    at = open_steering({"spart": "ablate"}, folder)
    script = next(c.value for c in at.code if c.value.startswith('"""Feature ablation'))
    script = script.replace(f"PATH/TO/{folder.name}", str(folder))  # a session's dictionary: the user gives its folder
    exec(compile(script, "feature_ablation.py", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    kl = bars(at, "How far the output moved")["data"][0]["y"]
    printed = out.split("KL at every position:")[1]
    values = [float(v) for v in printed.replace("tensor(", "").replace("dtype=torch.float64)", "").replace("[", "")
              .replace("]", "").replace(")", "").replace(",", " ").split()]
    np.testing.assert_allclose(values, plotly_array(kl).astype(float), atol=2e-4)


def test_a_slow_model_waits_for_a_click(monkeypatch):
    monkeypatch.setenv("VIZ_GATE_SECONDS", "0")
    at = open_steering({"alpha": "9.75"})  # a value no other test computed: the result is not in the cache
    assert not any(c.value.startswith("intact :") for c in at.code)
    button = next(b for b in at.button if b.label.startswith("Run the steered model"))
    button.click().run()
    assert not at.exception, [e.value for e in at.exception]
    intact, steered = continuation(at)
    assert intact != steered


def test_an_encoder_decoder_gets_one_line_and_the_moe_model_steers():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["model"] = "dates-iso"
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception and any("encoder-decoder" in i.value for i in at.info)
    at = open_steering({"model": "tinystories-moe", "alpha": "10.0"})
    intact, steered = continuation(at)
    assert intact != steered


def test_an_encoder_is_steered_at_a_position_without_next_token_words(tmp_path, tokenizer):
    from hf_models import bert_config, build, save
    from viz_ui.app.state import SessionModel
    model, _ = load_model(save(build("BertForMaskedLM", bert_config(vocab_size=320, max_position_embeddings=64)),
                               tmp_path / "bert"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["_session_models"] = {"upload:bert": SessionModel("bert-mlm", model, tokenizer, "bert")}
    at.session_state["_model"] = "bert-mlm"
    at.session_state["_text"] = "The cat sat on the mat. The cat"
    at.query_params["alpha"] = "0.0"
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    fig = bars(at, "Token at position")
    intact, steered = (plotly_array(t["x"]) for t in fig["data"])
    np.testing.assert_array_equal(intact, steered)  # alpha = 0
    words = " ".join(e.value for kind in (at.markdown, at.caption, at.info) for e in kind).lower()
    assert "next token" not in words and "no continuation" in words
