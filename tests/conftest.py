"""Shared fixtures: a tokenizer trained on the tests' own small text, and small random models."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np

import pytest
import torch

from viz_model import Config, VizTransformer
from viz_model.tokenizer import train_bpe
from redis_server import RedisServer

# Pages compute everything as they open, whatever this machine's speed (viz_ui.app.gate): a test of a gated view sets
# its own threshold (tests/test_gated.py); speed goals go in bench/, never in timed tests.
os.environ.setdefault("VIZ_GATE_SECONDS", "inf")

# A page's numbers against the same computation in the test (on the CPU): the app runs its models on the GPU where
# torch sees one (--device auto), and float32 sums in another order there differ by a few 1e-6 (measured on an H100:
# 5.2e-6 at most); on the CPU the two are the same computation.
PAGE_ATOL = 1e-5 if torch.cuda.is_available() else 1e-6

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


def small_config(**overrides) -> Config:
    base = dict(n_layers=2, d_model=32, n_heads=4, d_head=8, d_mlp=64, d_vocab=320, n_ctx=48)
    base.update(overrides)
    return Config(**base)


def small_model(seed: int = 0, **overrides) -> VizTransformer:
    model = VizTransformer(small_config(**overrides))
    model.init_weights(seed=seed)
    # Larger random biases and norm weights than GPT-2's init, so that tests notice a dropped term.
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        for name, p in model.named_parameters():
            if name.rsplit(".", 1)[-1].startswith("b") or name.endswith(".w"):
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    return model.eval()


@pytest.fixture(scope="session")
def corpus() -> str:
    return (DATA / "stories.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def tokenizer(corpus):
    return train_bpe([corpus], vocab_size=320)


@pytest.fixture
def model() -> VizTransformer:
    return small_model()


def plotly_array(value) -> np.ndarray:
    """A Plotly JSON array as numpy: plain lists, or Plotly's base64 typed arrays ``{dtype, bdata, shape}``."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = [int(n) for n in str(value.get("shape", len(flat))).split(",")]
        return flat.reshape(shape)
    return np.array(value, dtype=float)  # None (a gap) becomes NaN


def shown_figures(at, index: int | None = None) -> list[dict]:
    """Every Plotly figure an AppTest page shows, as Plotly JSON: ``st.plotly_chart``'s and the live charts'
    (viz_ui/app/live_chart.py). A live chart with frames is shown as the browser draws it at step ``index`` of its
    scrubber (default: the server's step): its figure with that step's frame merged into its traces and layout
    (tests/test_browser.py checks that the browser draws the same)."""
    from viz_ui.views.figures import merge_layout
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    for c in at.get("bidi_component"):
        data = proto_data(c.proto)
        if "figure" not in data:
            continue
        fig = json.loads(data["figure"])
        if "frames" in data:
            i = data["index"] if index is None else index
            fig = merge_frame(fig, json.loads(data["frames"])[i - data["first"]])
        figs.append(fig)
    return figs


def merge_frame(fig: dict, frame: dict) -> dict:
    """A live chart's figure (Plotly JSON) with a frame merged in, as viz_ui/live_chart.js draws it: each trace
    updated by the frame's update of it, the layout as ``update_layout`` would."""
    from viz_ui.views.figures import merge_layout
    traces = [dict(t, **u) for t, u in zip(fig["data"], frame["data"])] if "data" in frame else fig["data"]
    return dict(fig, data=traces, layout=merge_layout(fig["layout"], frame.get("layout")))


def proto_data(proto) -> dict:
    """The data a custom component's message (``BidiComponent`` proto) carries: a live chart's packed bytes
    (``viz_ui.app.live_chart.pack``) or another component's JSON."""
    from viz_ui.app.live_chart import unpack
    return unpack(proto.bytes) if proto.WhichOneof("data") == "bytes" else json.loads(proto.json)


def component_data(at, key: str) -> dict:
    """The data the custom component ``key`` (``st.components.v2``) was sent in the last run of an AppTest."""
    return next(proto_data(c.proto) for c in at.get("bidi_component") if c.proto.id.endswith(f"-{key}"))


def report_component_event(at, key: str, event: str, value):
    """Run the AppTest as a custom component's event (``setTriggerValue(event, value)`` in its JavaScript) makes
    Streamlit run it: the page's widgets as they are, with the event as the component ``key``'s trigger (AppTest has
    no element for custom components)."""
    from streamlit.components.v2.bidi_component.main import _make_trigger_id
    widgets = at._tree.get_widget_states()
    report = widgets.widgets.add()
    report.id = _make_trigger_id(next(c.proto.id for c in at.get("bidi_component") if c.proto.id.endswith(f"-{key}")),
                                 "events")
    report.json_trigger_value = json.dumps([{"event": event, "value": value}])
    return at._run(widgets)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real ``redis-server`` (Debian's package) for this test session; see ``tests/redis_server.py``."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()
