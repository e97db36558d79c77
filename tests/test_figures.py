"""Figure, table and numeric functions on plain numpy input."""

import numpy as np
import pytest

from conftest import plotly_array
from viz_ui.analysis.numeric import grid_block, pool_blocks
from viz_ui.views.figures import (MAX_LABELLED_TICKS, attention_grid, attention_heatmap, layer_head_heatmap,
                            matrix_heatmap, pca_scatter, plain_figure, position_curves, position_ticks,
                            style_for_display, style_plain, topk_bar)
from viz_ui.analysis.numeric import cosine_similarity, entropy_bits, fit_pca
from viz_ui.views.tables import token_chips_html, token_table, topk_table

LABELS = ["The", "·cat", "·saw", "·the", "·cat"]  # "·cat" twice: must stay two rows


def causal_pattern(n, seed=0):
    rng = np.random.default_rng(seed)
    s = np.where(np.tril(np.ones((n, n))) > 0, rng.normal(size=(n, n)), -np.inf)
    e = np.exp(s - s.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True), s


def test_attention_heatmap_keeps_repeated_tokens_apart():
    weights, scores = causal_pattern(5)
    fig = attention_heatmap(weights, LABELS, "t")
    np.testing.assert_array_equal(fig.data[0].z, weights)
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2, 3, 4]
    assert list(fig.layout.yaxis.ticktext) == ["0 The", "1 ·cat", "2 ·saw", "3 ·the", "4 ·cat"]
    assert (fig.data[0].zmin, fig.data[0].zmax) == (0, 1)


def test_score_heatmap_blanks_the_mask_and_names_it():
    _, scores = causal_pattern(5)
    fig = attention_heatmap(scores, LABELS, "t", kind="scores")
    z = np.array(fig.data[0].z, dtype=float)
    assert np.isnan(z[0, 1]) and z[1, 0] == pytest.approx(scores[1, 0])
    # a masked cell is a gap without hover; the others hover with their query, key and score
    assert fig.data[0].hoverongaps is False and fig.data[0].hovertemplate.endswith("%{z:.4f}<extra></extra>")
    assert list(fig.data[0].customdata[3][0]) == ["·the", "The"]  # the tokens; %{y}, %{x}: their positions
    assert fig.data[0].zmax == pytest.approx(np.abs(scores[np.isfinite(scores)]).max())
    # the clickable markers (st.plotly_chart) cover every cell: theirs name a masked cell
    clickable = attention_heatmap(scores, LABELS, "t", kind="scores", clickable=True).data[1].customdata
    assert clickable[0 * 5 + 3][2] == "masked (−∞)" and clickable[3 * 5 + 0][2] == f"{scores[3, 0]:.4f}"


def test_attention_grid_tiles_every_head_and_pools_long_inputs():
    layers, heads, n = 3, 4, 10
    pats = np.stack([np.stack([causal_pattern(n, 10 * l + h)[0] for h in range(heads)]) for l in range(layers)])
    fig, pooled = attention_grid(pats)
    canvas = np.array(fig.data[0].z, dtype=float)
    gap = 1
    assert not pooled and canvas.shape == (layers * (n + gap) - gap, heads * (n + gap) - gap)
    np.testing.assert_allclose(canvas[2 * (n + gap):2 * (n + gap) + n, 3 * (n + gap):3 * (n + gap) + n], pats[2, 3], rtol=1e-6)
    assert np.isnan(canvas[n, 0])  # the gap between layer rows
    big = np.stack([np.stack([causal_pattern(100, h)[0] for h in range(2)])])
    fig, pooled = attention_grid(big, max_tile=25)
    tile = np.array(fig.data[0].z, dtype=float)[:25, :25]
    assert pooled and tile[0, 0] == pytest.approx(big[0, 0, :4, :4].max(), rel=1e-6)
    assert "max-pooled over 4×4" in fig.layout.title.text


def test_ticks_are_thinned_for_long_sequences():
    ticks = position_ticks([f"t{i}" for i in range(200)], max_ticks=50)
    assert ticks["tickvals"][:3] == [0, 4, 8] and len(ticks["tickvals"]) == 50


def test_matrix_heatmap_is_symmetric_around_zero():
    m = np.array([[1.0, -3.0], [0.5, 2.0]])
    fig = matrix_heatmap(m, ["a", "b"], "t")
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-3.0, 3.0)
    np.testing.assert_array_equal(fig.data[0].z, m)


def test_topk_bar_and_table():
    probs = np.array([0.1, 0.6, 0.05, 0.25])
    logits = np.log(probs)
    table = topk_table(probs, logits, ["a", "b", "c", "d"], 3)
    assert table["token"].tolist() == ["b", "d", "a"] and table["rank"].tolist() == [1, 2, 3]
    fig = topk_bar(table["token"].tolist(), table["probability"].to_numpy(), "t", highlight=1)
    assert list(fig.layout.yaxis.ticktext) == ["b", "d", "a"]
    np.testing.assert_array_equal(plotly_array(fig.to_plotly_json()["data"][0]["x"]), [0.6, 0.25, 0.1])
    assert fig.data[0].marker.color[1] == "#d62728"


def test_pca_recovers_the_main_direction_and_projects():
    rng = np.random.default_rng(0)
    direction = np.array([3.0, 4.0, 0.0]) / 5
    x = rng.normal(size=(500, 1)) * 10 * direction + rng.normal(size=(500, 3)) * 0.1
    pca = fit_pca(x, 2)
    assert abs(pca.components[0] @ direction) == pytest.approx(1.0, abs=1e-3)
    assert pca.explained[0] > 0.99
    np.testing.assert_allclose(pca.project(x)[:, 0], (x - x.mean(0)) @ pca.components[0])
    fig = pca_scatter(pca.project(x), pca.project(x[:3]), ["a", "b", "c"], pca.explained, "t")
    assert fig.data[1].text == ("0 a", "1 b", "2 c") and fig.layout.xaxis.title.text == f"PC1 ({pca.explained[0]:.1%})"
    with pytest.raises(ValueError):
        fit_pca(x[:1])


def test_cosine_similarity_and_entropy():
    sim = cosine_similarity(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, -1.0], [0.0, 0.0]]))
    np.testing.assert_allclose(sim[:3, :3], [[1, 1, 0], [1, 1, 0], [0, 0, 1]])
    assert not sim[3].any()
    assert entropy_bits(np.array([0.5, 0.5, 0.0])) == pytest.approx(1.0)
    assert entropy_bits(np.full(8, 1 / 8)) == pytest.approx(3.0)


def test_token_table_and_chips_escape_html():
    labels = ["<b>", "·&"]
    table = token_table(np.array([5, 6]), labels, [(0, 3), (3, 5)], "<b> &")
    assert table["characters"].tolist() == ["'<b>'", "' &'"]
    html = token_chips_html(labels, np.array([5, 6]))
    assert "&lt;b&gt;" in html and "<b>" not in html and "<style" not in html  # its styles: viz_ui/app/base.css
    assert 'title="position 1, id 6"' in html


def test_position_curves_plot_the_table_columns():
    table = np.arange(20.0).reshape(10, 2)
    fig = position_curves(table, [1], 4, "t")
    np.testing.assert_array_equal(plotly_array(fig.to_plotly_json()["data"][0]["y"]), table[:, 1])
    assert fig.layout.shapes[0].x1 == 3.5


def test_views_stay_light_at_12_layers_12_heads_256_tokens():
    rng = np.random.default_rng(0)
    pats = rng.random((12, 12, 256, 256)).astype(np.float32)
    pats /= pats.sum(-1, keepdims=True)
    fig, pooled = attention_grid(pats)
    canvas = np.array(fig.data[0].z, dtype=float)
    assert pooled and canvas.size <= (12 * 54) * (12 * 54)  # tiles of at most 48 cells + gaps
    assert len(fig.to_json()) < 2_000_000
    single = attention_heatmap(pats[3, 4], [f"t{i}" for i in range(256)], "t")
    assert len(single.layout.yaxis.tickvals) <= MAX_LABELLED_TICKS == 32  # thinned tick labels stay readable


def test_style_for_display_scales_every_font():

    fig = style_for_display(layer_head_heatmap(np.full((2, 2), 0.5), "t"), scale=2.0, theme="dark")
    assert fig.layout.font.size == 30 and fig.layout.xaxis.tickfont.size == 30
    assert fig.data[0].textfont.size == 28
    assert fig.layout.paper_bgcolor == "#0e1117" and fig.layout.font.color == "#f2f2f2"


@pytest.mark.parametrize("display", [None, (1.0, "light"), (1.6, "dark")])
def test_figures_built_without_validation_write_plotly_s_validated_json(monkeypatch, display):
    """one_pass_figure skips Plotly's validation (its copy of the hover labels cost 15-20 ms a heatmap): every figure
    built through it writes the JSON of the same figure validated (titles and colour scales given as shorthands,
    the display's template given by name), also once styled by style_for_display."""
    import json

    import plotly.graph_objects as go
    import plotly.io as pio
    from viz_ui.views import figures
    from viz_ui.views.qk import TermGrid, qk_heatmap
    from viz_ui.views.timeline import loss_curves, score_curves
    rng = np.random.default_rng(1)
    pats = rng.random((2, 3, 6, 6)).astype(np.float32)
    _, scores = causal_pattern(6)
    labels = [f"t<{i}>" for i in range(6)]
    steps = [0, 10, 100, 1000]
    terms, induction = rng.normal(size=(2, 2)), rng.random((4, 2, 3))
    builders = [lambda: attention_heatmap(pats[0, 1], labels, "w", display=display),
                lambda: attention_heatmap(scores, labels, "s", kind="scores", offset=3, clickable=True, display=display),
                lambda: attention_grid(pats, labels=labels, display=display)[0],
                lambda: qk_heatmap(TermGrid(["a", "other"], ["b", "other"], terms, None), "q",
                                   display=display),
                lambda: loss_curves(steps, [4.0, 3.0, 2.5, 2.0], None, 100, (10, 100), display=display),
                lambda: score_curves(steps, {"induction": induction}, None, display=display)]

    class Validated(go.Figure):
        def __init__(self, data=None, _validate=True, **kwargs):
            super().__init__(data, **kwargs)

    for build in builders:
        fast = build()
        with monkeypatch.context() as m:
            m.setattr(figures.go, "Figure", Validated)
            checked = build()
        assert json.loads(pio.to_json(fast, validate=False)) == json.loads(pio.to_json(checked, validate=False))
        styled = [json.loads(pio.to_json(style_for_display(f, 1.3, "dark"), validate=False)) for f in (fast, checked)]
        assert styled[0] == styled[1]
        # a caller's later update is validated as on any figure (a title given as its text gets its "text")
        later = [json.loads(pio.to_json(f.update_layout(title="later"), validate=False)) for f in (fast, checked)]
        assert later[0] == later[1] and later[0]["layout"]["title"]["text"] == "later"
    # built without validation: the hover labels stay a numpy string array (validation made them an object array)
    assert builders[0]().data[0].customdata.dtype.kind == "U"


@pytest.mark.parametrize("scale, theme", [(1.0, "light"), (1.6, "dark")])
def test_a_live_chart_s_plain_figure_is_plotly_s_own_json(scale, theme):
    """What a live chart sends (plain_figure, styled by style_plain, without Plotly's copy and validation) is the JSON
    Plotly writes for the figure styled by style_for_display: heatmaps with NaN and hover labels (object arrays),
    a clickable overlay, tiles with texts, bars, subplots' axes."""
    import json

    import plotly.io as pio
    from plotly.subplots import make_subplots
    rng = np.random.default_rng(0)
    pats = rng.random((2, 3, 6, 6)).astype(np.float32)
    scores = np.where(np.tril(np.ones((6, 6), bool)), rng.normal(size=(6, 6)), -np.inf)
    labels, per_head = [f"t{i}" for i in range(6)], rng.random((2, 3))

    def subplots():
        fig = make_subplots(rows=1, cols=2)
        fig.add_bar(x=[1, 2], y=np.array([0.5, 0.25]), row=1, col=1, textfont=dict(size=11))
        fig.add_scatter(x=np.arange(3), y=np.array([1.0, np.nan, 2.0]), row=1, col=2)
        return fig

    builders = [lambda: attention_heatmap(pats[0, 1], labels, "w", clickable=True),
                lambda: attention_heatmap(scores, labels, "s", kind="scores", offset=3),
                lambda: attention_grid(pats)[0], lambda: topk_bar(labels[:3], np.array([0.5, 0.3, 0.2]), "p", 1),
                lambda: layer_head_heatmap(per_head, "l"), subplots]
    for build in builders:
        ours = json.loads(pio.json.to_json_plotly(style_plain(plain_figure(build()), scale, theme)))
        theirs = json.loads(pio.to_json(style_for_display(build(), scale, theme), validate=False))
        assert ours == theirs


def test_the_overview_pooled_one_layer_at_a_time_draws_the_same_figure():
    from viz_ui.views.export import pooled_pattern_table
    from viz_ui.analysis.heads import overview_patterns
    pats = np.random.default_rng(0).random((3, 4, 130, 130)).astype(np.float32)
    arrays = {f"blocks.{i}.attn.hook_pattern": pats[i] for i in range(3)}
    pooled, block = overview_patterns(arrays, 3)
    assert block == grid_block(3, 4, 130, 130) > 1 and pooled.shape == (3, 4, -(-130 // block), -(-130 // block))
    whole, was_pooled = attention_grid(pats)
    by_layer, also_pooled = attention_grid(pooled, pooled_by=block)
    assert was_pooled and also_pooled and whole.layout.title.text == by_layer.layout.title.text
    np.testing.assert_array_equal(np.array(whole.data[0].z, dtype=float), np.array(by_layer.data[0].z, dtype=float))
    # a block's cell is the maximum of its block; the last block is cut at the text's end
    assert pooled[2, 3, 0, 1] == pats[2, 3, :block, block:2 * block].max()
    table = pooled_pattern_table(pooled, block, 130, 130)
    last = table.iloc[-1]
    assert len(table) == pooled.size and last["query_pos_to"] == 129 and last["key_pos_to"] == 129
    assert last["max_weight"] == pytest.approx(pats[2, 3, int(last["query_pos_from"]):, int(last["key_pos_from"]):].max())
    assert pool_blocks(pats, 1) is pats


@pytest.mark.parametrize("n_tokens", [5, 16, 37, 300])
def test_the_model_map_from_pooled_mlp_thumbnails_is_the_same_figure(n_tokens):
    """The landing page keeps each layer's MLP thumbnail (pooled once per text, viz_ui.app.state.get_mlp_thumbnails)
    instead of every layer's [pos, d_mlp] array: the map drawn from them is the map drawn from the arrays."""
    from viz_ui.views.overview import model_map, pool_signed, thumbnail_side
    rng = np.random.default_rng(n_tokens)
    patterns = rng.random((2, 3, n_tokens, n_tokens)).astype(np.float32)
    x = rng.standard_normal((n_tokens, 8)).astype(np.float32)
    mlp = [rng.standard_normal((n_tokens, 70)).astype(np.float32) for _ in range(2)]
    side = thumbnail_side(patterns)
    assert 1 <= side <= 16 and side == min(n_tokens, side)
    whole = model_map(x, patterns, mlp, "gelu").to_dict()
    thumbs = [pool_signed(m, side, side) for m in mlp]
    pooled = model_map(x, patterns, thumbs, "gelu", mlp_units=[70, 70]).to_dict()
    assert len(whole["data"]) == len(pooled["data"])
    for a, b in zip(whole["data"], pooled["data"]):
        for key in ("z", "x", "y", "text", "x0", "dx", "y0", "dy"):
            if key in a:
                np.testing.assert_array_equal(np.asarray(a[key], dtype=object), np.asarray(b[key], dtype=object))


# ---- the grids' labels at real sizes (issue 51) ---------------------------------------------------------------------
# Llama-3.2-1B's 16 layers × 32 heads (its head labels ran over the titles of the start and attention pages) and a
# 70 B model's 80 × 64. The narrowest plot a grid is drawn in, measured in Chromium at 1280 × 800: the attention
# page's grid in lecture mode at font scale 2.5, 858 px at 38 px fonts.
GRID_SHAPES = [(16, 32), (80, 64)]
NARROWEST_PLOT_EM = 858 / 38
CHAR_EM = 0.68  # the widest capital or digit of the fonts Plotly asks for (Verdana's H: 0.75, its digits: 0.64)
TEXT_LINE_EM = 1.2  # a line of text's box


def grid_figures(n_layers: int, n_heads: int, n_tokens: int = 12):
    from viz_ui.views.overview import model_map
    rng = np.random.default_rng(n_layers)
    patterns = rng.random((n_layers, n_heads, n_tokens, n_tokens)).astype(np.float32)
    x = rng.standard_normal((n_tokens, 16)).astype(np.float32)
    mlp = [rng.standard_normal((n_tokens, 32)).astype(np.float32) for _ in range(n_layers)]
    title = f"input, then {n_layers} layers × ({n_heads} heads + MLP)"
    return {"model map": model_map(x, patterns, mlp, "gelu", title=title), "all heads": attention_grid(patterns)[0]}


@pytest.mark.parametrize("scale", [1.0, 1.5, 2.5])
@pytest.mark.parametrize("shape", GRID_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_grid_labels_stay_below_the_title_and_clear_of_each_other(shape, scale):
    """From the layout of the start page's model map and the attention page's grid, styled for the display: the head
    labels on top are never turned (Plotly turns colliding labels up into the title's band), the margin above the plot
    holds the mode bar's band, the title's line and the labels' line, and the labels shown stand far enough apart to
    be read side by side (columns) and one above the other (rows) in the narrowest plot."""
    for name, fig in grid_figures(*shape).items():
        fig = style_for_display(fig, scale)
        layout, font = fig.layout, fig.layout.font.size
        x, y = layout.xaxis, layout.yaxis
        assert x.side == "top" and x.tickangle == 0 and y.tickangle == 0, name
        # the title: one line, its top MODEBAR_BAND px below the figure's top (Plotly's title font: 1.4 × the font)
        assert (layout.title.yref, layout.title.y, layout.title.yanchor) == ("container", 1, "top"), name
        title_bottom = layout.title.pad.t + TEXT_LINE_EM * round(1.4 * font)
        labels_top = layout.margin.t - 3 - TEXT_LINE_EM * font  # top labels stand 3 px above the plot
        assert labels_top >= title_bottom, (name, layout.margin.t, labels_top, title_bottom)
        # the columns: the labels' centres at least half of each neighbour's width apart, in the narrowest plot
        x_px = NARROWEST_PLOT_EM * font / (x.range[1] - x.range[0])
        for (a, text_a), (b, text_b) in zip(zip(x.tickvals, x.ticktext), list(zip(x.tickvals, x.ticktext))[1:]):
            assert (b - a) * x_px >= CHAR_EM * font * (len(text_a) + len(text_b)) / 2, (name, text_a, text_b)
        # the rows: a line of text apart, in the plot's height (and, for square tiles, its narrowest width)
        plot_h = layout.height - layout.margin.t - layout.margin.b
        y_px = plot_h / abs(y.range[0] - y.range[1])
        if x.scaleanchor == "y":
            y_px = min(y_px, x_px)
        assert min(np.diff(sorted(y.tickvals))) * y_px >= TEXT_LINE_EM * font, (name, y.ticktext)
        # a thinned axis still names the first layer and head shown, and the model map its input row and MLP column
        assert x.ticktext[0] == "H0" and len(x.ticktext) >= 6, (name, x.ticktext)
        if name == "model map":
            assert x.ticktext[-1] == "MLP" and y.ticktext[0] == "x = input", (x.ticktext, y.ticktext)


def test_grid_labels_are_all_shown_where_they_fit_and_thinned_by_whole_steps():
    """A small model keeps every label; a large one shows every 2nd, 4th, … head and every 2nd, 5th, … layer."""
    small = grid_figures(6, 8)
    assert list(small["model map"].layout.xaxis.ticktext) == [f"H{i}" for i in range(8)] + ["MLP"]
    assert list(small["all heads"].layout.yaxis.ticktext) == [f"L{i}" for i in range(6)]
    big = grid_figures(80, 64)
    heads = list(big["all heads"].layout.xaxis.ticktext)
    step = int(heads[1][1:])
    assert step in (2, 4, 8, 16) and heads == [f"H{i}" for i in range(0, 64, step)]
    layers = list(big["model map"].layout.yaxis.ticktext)
    assert layers[0] == "x = input" and int(layers[2][1:]) - int(layers[1][1:]) in (2, 5, 10)
