"""Every page with a hostile tokenizer (issue 51, item 6): token texts, the model's name, its predictions and its
dictionary's contexts are Markdown images, links, formulas, icons and HTML (``tests/hostile_ui.py``), and every page
shows them as plain text.

Through AppTest, each element a page sends is read as Streamlit's frontend reads it: Markdown where Streamlit renders
Markdown (``st.markdown``, captions, alerts, headings, widget labels and help, radio and slider options, progress
texts, expander and tab labels, every cell and header of a static ``st.table``), HTML in ``st.html``, Plotly's subset
of HTML in every string of a figure. None may hold a hostile string as it is: each must come escaped
(:func:`viz_ui.analysis.text.plain`, ``html.escape``, :func:`viz_ui.views.figures._plain`). The browser test
(``test_hostile_browser.py``) checks the same pages' DOM and requests in Chromium.
"""

from __future__ import annotations

import html
import json

import pytest
from streamlit.testing.v1 import AppTest

from conftest import proto_data
from helpers import open_page
from hostile_ui import HOSTILE, KINDS, MODEL_NAME, TEXT, dictionary_set, hostile_model, hostile_tokenizer
from viz_ui.analysis.text import plain
from viz_ui.analysis.text_trace import token_label
from viz_ui.app.navigation import PAGES
from viz_ui.app.state import SessionModel

SET_LABEL = f"uploaded: {MODEL_NAME} (1 dictionary)"
# How a page may draw a hostile token: as typed, and as a token label (spaces as ·)
RAW = sorted({*HOSTILE, *(t.replace(" ", "·") for t in HOSTILE), MODEL_NAME}, key=len, reverse=True)
HTML_RAW = [r for r in RAW if "<" in r]  # what HTML and Plotly would read as a tag
MARKDOWN_FIELDS = {"body", "label", "help", "text", "caption", "tooltip", "placeholder_markdown"}
MARKDOWN_OPTIONS = {"radio", "select_slider", "button_group"}  # whose options Streamlit renders as Markdown
LITERAL_TYPES = {"code", "json", "text_area", "text_input", "arrow_data_frame", "exception"}


@pytest.fixture(scope="module")
def hostile(tokenizer, corpus, tmp_path_factory):
    """``{kind: (tokenizer, model, dictionary folder)}`` for each model family of :data:`hostile_ui.KINDS`."""
    tok = hostile_tokenizer(tokenizer)
    models = {kind: hostile_model(tok, kind) for kind in KINDS}
    # one set for all: its index built on the decoder (an encoder-decoder's pages say why they cannot use it)
    folder = dictionary_set(models["decoder"], tok, tmp_path_factory.mktemp("hostile_set"), corpus)
    return {kind: (tok, model, folder) for kind, model in models.items()}


def open_hostile(hostile, page: str, query: dict | None = None, kind: str = "decoder") -> AppTest:
    """:func:`helpers.open_page` on ``page`` for a visitor who uploaded the hostile model of ``kind`` (named
    :data:`MODEL_NAME`), typed :data:`TEXT` and has the hostile dictionary set."""
    tok, model, folder = hostile[kind]
    key = f"upload:hostile-{kind}"  # a key per model: the server's caches are keyed by it
    session = {"_session_models": {key: SessionModel(MODEL_NAME, model, tok, "hostile.safetensors")},
               "_model": MODEL_NAME, "_text": TEXT, "_feature_sets": {key: {SET_LABEL: (str(folder),)}}}
    return open_page(None if page == "app.py" else page, query=query, session=session, timeout=180)


def _strings(message, prefix: str = ""):
    """``(field path, text)`` of every string field in a protobuf message, recursively."""
    for field, value in message.ListFields():
        values = list(value) if field.is_repeated else [value]
        for v in values:
            if isinstance(v, str):
                yield prefix + field.name, v
            elif hasattr(v, "ListFields"):
                yield from _strings(v, prefix + field.name + ".")


def _figure_strings(value, path: str = ""):
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _figure_strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _figure_strings(v, f"{path}[{i}]")


def _raw(text: str, forms) -> str | None:
    return next((r for r in forms if r in text), None)


def leaks(at: AppTest) -> list[tuple[str, str, str]]:
    """``(element type, field, hostile string)`` for every hostile string a page sends where the frontend would read
    it as markup."""
    found = []
    for node in at._tree:
        proto, kind = getattr(node, "proto", None), getattr(node, "type", "")
        if proto is None or not hasattr(proto, "ListFields"):
            continue
        if kind == "plotly_chart":
            for path, text in _figure_strings(json.loads(proto.spec)):
                if hit := _raw(text, HTML_RAW):
                    found.append((kind, path, hit))
            continue
        if kind == "bidi_component":
            data = proto_data(proto)
            # the live charts' figures, and the Circuits graph's payload (its texts go to Plotly and to the DOM's
            # textContent only, viz_ui/app/circuit_graph.js: neither reads Markdown, Plotly reads tags)
            for key in ("figure", "frames", "payload"):
                if key in data:
                    for path, text in _figure_strings(json.loads(data[key])):
                        if hit := _raw(text, HTML_RAW):
                            found.append((kind, key + path, hit))
            for path, text in _figure_strings({k: v for k, v in data.items() if k not in ("figure", "frames", "payload")}):
                if hit := _raw(text, RAW):
                    found.append((kind, path, hit))
            continue
        if kind == "html":
            if hit := _raw(proto.body, HTML_RAW):
                found.append((kind, "body", hit))
            continue
        if kind == "table":
            frame = node.value
            cells = [*map(str, frame.columns), *map(str, frame.index), *(str(v) for v in frame.to_numpy().ravel())]
            found += [(kind, "cell", hit) for cell in cells if (hit := _raw(cell, RAW))]
            continue
        for field, text in _strings(proto):
            name = field.rsplit(".", 1)[-1]
            markdown = name in MARKDOWN_FIELDS or (name == "options" and kind in MARKDOWN_OPTIONS)
            if kind in LITERAL_TYPES and name not in ("label", "help"):
                markdown = False
            if markdown and (hit := _raw(text, RAW)):
                found.append((kind, field, hit))
    return found


def shown(at: AppTest, kind: str) -> str:
    """Every string of the elements of ``kind`` a page sends, joined."""
    return "\n".join(text for node in at._tree if getattr(node, "type", "") == kind
                     for _, text in _strings(node.proto))


# Views a page shows only after a choice (a link's parameters choose them as a click would)
STATES = [
    ("pages/interventions.py", {"part": "ablation", "ablate": "L0H0,L1H1"}),
    ("pages/interventions.py", {"part": "patching"}),
    ("pages/interventions.py", {"part": "attribution"}),
    ("pages/steering.py", {"steer": "contrastive"}),
    ("pages/steering.py", {"spart": "ablate"}),
]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("page", [p for p, _, _ in PAGES])
def test_every_page_shows_hostile_strings_as_text(hostile, page, kind):
    """Every page on a decoder, a mixture of experts and an encoder-decoder whose tokens, name and predictions are
    hostile; in lecture mode too, where tables are static ``st.table`` whose cells are Markdown."""
    for lecture in ("false", "true"):
        at = open_hostile(hostile, page, {"lecture": lecture}, kind)
        assert leaks(at) == [], (page, kind, lecture)


@pytest.mark.parametrize("page, query", STATES, ids=[f"{p}-{'-'.join(q.values())}" for p, q in STATES])
def test_views_behind_a_choice_show_hostile_strings_as_text(hostile, page, query):
    assert leaks(open_hostile(hostile, page, query)) == []


def test_every_walkthrough_step_and_a_generation(hostile):
    at = open_hostile(hostile, "pages/walkthrough.py")
    steps = at.selectbox(key="step").options
    assert len(steps) >= 8
    for step in steps[1:]:
        assert leaks(open_hostile(hostile, "pages/walkthrough.py", {"step": str(step)})) == [], step
    at = open_hostile(hostile, "pages/output.py", {"lecture": "true"})
    at.number_input(key="n_new").set_value(6).run()
    at.button[0].click().run()
    assert not at.exception and at.get("table")
    assert leaks(at) == []


def test_the_steering_page_names_a_hostile_token_literally(hostile):
    """The issue's case: the text's last token in the Steering page's Markdown, escaped so that it reads as typed."""
    tok, _, _ = hostile["decoder"]
    at = open_hostile(hostile, "pages/steering.py")
    assert leaks(at) == []
    last = token_label(tok, tok.token_to_id(HOSTILE[0]))
    markdown = shown(at, "markdown")
    assert f"Top next token after “{plain(last)}”" in markdown, markdown[:2000]
    assert f"“{last}”" not in markdown


def test_token_chips_and_feature_contexts_hold_the_escaped_text(hostile):
    tok, _, _ = hostile["decoder"]
    labels = [token_label(tok, tok.token_to_id(t)) for t in HOSTILE]
    chips = shown(open_hostile(hostile, "pages/tokens.py"), "html")
    assert all(html.escape(label, quote=False) in chips for label in labels)
    at = open_hostile(hostile, "pages/features.py")
    contexts = shown(at, "html")
    assert "fctx" in contexts and sum(html.escape(label, quote=False) in contexts for label in labels) >= 3


def test_lecture_mode_tables_hold_the_escaped_text(hostile):
    """The token table of the Tokens page in lecture mode: each hostile token's cell is its Markdown-escaped label."""
    tok, _, _ = hostile["decoder"]
    table = open_hostile(hostile, "pages/tokens.py", {"lecture": "true"}).get("table")[0].value
    labels = [token_label(tok, tok.token_to_id(t)) for t in HOSTILE]
    assert all(plain(label, None) in set(table[plain("token")]) for label in labels)


def test_figures_escape_labels_and_their_csv_gives_them_back():
    """Plotly reads <b>, <s>, <a href> in a figure's strings: every figure function escapes the labels it is given
    (viz_ui.analysis.text.plotly_text), and the figure's CSV holds them as they were."""
    import numpy as np
    from viz_ui.views.export import figure_frame
    from viz_ui.views.figures import attention_heatmap, value_bar
    bars = value_bar(HOSTILE, np.arange(len(HOSTILE), dtype=float), "t", "x")
    assert "<b>" not in json.dumps(bars.to_plotly_json()["data"]) and "&lt;b&gt;" in bars.data[0].customdata
    assert figure_frame(bars)["label"].tolist() == HOSTILE
    heat = attention_heatmap(np.eye(len(HOSTILE)), HOSTILE, "t")
    assert figure_frame(heat).index.tolist() == [f"{i} {t}" for i, t in enumerate(HOSTILE)]
