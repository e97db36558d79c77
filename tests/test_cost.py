"""The quadratic-cost view: one layer's attention timed on the model's own shapes."""

import numpy as np

from conftest import small_model
from viz_ui.analysis.cost import attention_cost, quadratic_fit


def test_attention_cost_measures_quadratic_memory_and_positive_times():
    model = small_model(n_ctx=600)
    frame = attention_cost(model, [64, 128, 256], repeats=1)
    cfg = model.cfg
    # the score matrix really is n_heads × n × n float32: 4 × the memory for twice the length
    np.testing.assert_allclose(frame["scores_MB"], [cfg.n_heads * n * n * 4 / 2**20 for n in (64, 128, 256)])
    assert (frame["time_ms"] > 0).all()
    assert list(frame["flops"]) == [4 * cfg.n_heads * n * n * cfg.d_head for n in (64, 128, 256)]
    fitted = quadratic_fit(frame)
    assert np.allclose(fitted / frame["flops"], fitted[0] / frame["flops"][0])  # one constant times n²·d


def test_the_inspector_measures_on_click():
    from streamlit.testing.v1 import AppTest

    from conftest import ROOT
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/inspector.py").run()
    next(b for b in at.button if b.label == "Measure on this machine").click().run()
    assert not at.exception
    from helpers import figure_titled
    fig = figure_titled(at, "One attention layer")
    assert len(fig["data"]) == 3
