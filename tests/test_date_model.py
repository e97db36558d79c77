"""The shipped encoder-decoder (assets/models/dates-iso.safetensors): accuracy on dates it never saw,
cross-attention that aligns output with input, the generate command, and the app's views of it."""

from __future__ import annotations

import datetime
import random
import subprocess
import sys

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT, plotly_array
from helpers import PAGES, figure_titled
from viz_model import load_model
from viz_model.loading.checkpoint import ASSETS
from viz_model.training.dates import FIRST, FORMATS, N_DAYS, is_held_out, write_date
from viz_model.seq2seq import exact_match
from viz_ui.analysis.text import plain
from viz_ui.analysis.text_trace import run_trace

DATES = ASSETS / "dates-iso.safetensors"


@pytest.fixture(scope="module")
def dates_model():
    return load_model(DATES)


def held_out_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    held = [d for d in (FIRST + datetime.timedelta(days=i) for i in range(0, N_DAYS, 3)) if is_held_out(d)]
    return [(write_date(d, rng.choice(list(FORMATS)), rng.random() < 0.5), d.isoformat()) for d in rng.choices(held, k=n)]


def test_at_least_99_percent_on_held_out_dates_in_every_format(dates_model):
    model, tok = dates_model
    assert model.cfg.is_encoder_decoder and model.cfg.norm_placement == "post" and model.cfg.positional == "sinusoidal"
    acc, misses = exact_match(model, tok, held_out_pairs(1200, seed=777))
    assert acc >= 0.99, misses[:5]
    card = DATES.with_suffix(".md").read_text(encoding="utf-8")
    for needle in ("python -m viz_model.training --task dates", "held out", "minutes", "exact match"):
        assert needle in card


def test_year_digits_attend_to_the_year_in_the_source(dates_model):
    """In the last decoder layer (mean over heads), the positions that write the four year digits look
    hardest at the source's year."""
    model, tok = dates_model
    hits = total = 0
    for src, iso in held_out_pairs(60, seed=5):
        trace = run_trace(model, tok, src)
        text = "".join(lbl.replace("·", " ") for lbl in trace.src_labels)
        start = text.rindex(iso[:4])
        year = set(range(start, start + 4))
        pattern = trace.arrays[f"blocks.{model.cfg.n_layers - 1}.cross_attn.hook_pattern"].mean(0)  # [tgt, src]
        for row in range(4):  # decoder positions 0..3 predict the year digits
            hits += int(pattern[row].argmax()) in year
            total += 1
    assert hits / total >= 0.9, f"{hits}/{total}"


def test_generate_command_normalises_dates():
    run = subprocess.run([sys.executable, "-m", "viz_model.generate", "--model", str(DATES), "3rd of March 2021",
                          "wednesday, march 3, 2021", "Dec 31st 2099"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["2021-03-03", "2021-03-03", "2099-12-31"]


def open_dates(page: str | None, text: str = "3rd of March 2021") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["model"] = "dates-iso"
    at.query_params["text"] = text
    at.run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("page", [None, *PAGES])
def test_every_page_renders_on_the_date_model(page):
    at = open_dates(page)
    assert not at.error, [e.value for e in at.error]


def test_encoder_decoder_page_shows_the_models_own_cross_attention(dates_model):
    model, tok = dates_model
    at = open_dates("pages/encoder_decoder.py", "Wednesday, March 3, 2021")
    assert any(m.value == plain("2021-03-03", None) for m in at.metric)  # Markdown that shows 2021-03-03
    trace = run_trace(model, tok, "Wednesday, March 3, 2021")
    fig = figure_titled(at, "Cross-attention, decoder L0 H0")
    np.testing.assert_allclose(plotly_array(fig["data"][0]["z"]), trace.arrays["blocks.0.cross_attn.hook_pattern"][0],
                               atol=1e-6)
    enc = figure_titled(at, "Encoder L0 H0: unmasked weights")
    assert np.triu(plotly_array(enc["data"][0]["z"]), 1).sum() > 0.5  # the encoder sees later tokens
    dec = figure_titled(at, "Decoder L0 H0: masked scores")
    z = plotly_array(dec["data"][0]["z"])
    assert np.isnan(z[np.triu_indices(len(z), 1)]).all()  # the mask: −∞ cells are left blank
    from viz_ui.views.export import trace_npz
    data = np.load(__import__("io").BytesIO(trace_npz(trace)))
    assert list(data["src_labels"]) == trace.src_labels and data["encoder.blocks.0.attn.hook_pattern"].shape[-1] == len(
        trace.src_ids)
    at.selectbox(key="step_dec").set_value(2).run()
    at.slider(key="temperature").set_value(0.0).run()
    bars = figure_titled(at, "Next token at step 2")
    assert plotly_array(bars["data"][0]["x"]).max() == pytest.approx(1.0)  # T = 0: greedy, one-hot


def test_encoder_decoder_page_explains_itself_on_a_decoder_only_model():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/encoder_decoder.py").run()
    assert not at.exception and any("dates-iso" in i.value.replace("\\", "") for i in at.info)  # a model name is escaped markdown
