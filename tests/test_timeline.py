"""Training timelines: the format read as untrusted input, the shipped timeline measured again from its own
snapshots, and the timeline page showing the snapshots' own numbers."""

import json
import os
import zipfile

import numpy as np
import pytest
import torch
from safetensors import safe_open
from streamlit.testing.v1 import AppTest

from conftest import ROOT, component_data, plotly_array, report_component_event, shown_figures, small_model
from viz_model import CheckpointError, load_model, save_checkpoint
from viz_model.sampling import generate
from viz_ui.analysis.text import plain
from viz_model.loading.timeline import (load_timeline, load_timeline_upload, log_spaced_steps, phase_change,
                                         read_timeline, write_timeline)

SHIPPED = ROOT / "assets" / "timelines" / "induction-2l"


# ------------------------------------------------------------------------------------------------- the format


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory, tokenizer):
    """Three tiny float16 checkpoints (different seeds) in a folder with a timeline.json."""
    folder = tmp_path_factory.mktemp("tl")
    names = []
    for step, seed in ((0, 0), (10, 1), (100, 2)):
        names.append(f"step_{step:06d}.safetensors")
        save_checkpoint(small_model(seed=seed), tokenizer, folder / names[-1], dtype=torch.float16)
    write_timeline(folder, [0, 10, 100], names, [5.0, 4.0, 3.0], [5.1, 4.2, 3.3])
    return folder


def _edit(folder, tmp_path, change):
    """A copy of the timeline whose timeline.json went through ``change(data)`` (the snapshots hard-linked)."""
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in folder.glob("*.safetensors"):
        os.link(f, copy / f.name)
    data = json.loads((folder / "timeline.json").read_text())
    change(data)
    (copy / "timeline.json").write_text(json.dumps(data) if isinstance(data, dict) else data)
    return copy


def test_float16_snapshots_load_as_float32(snapshots):
    path = snapshots / "step_000010.safetensors"
    with safe_open(str(path), "pt") as f:
        assert f.get_tensor("embed.W_E").dtype == torch.float16
    model, _ = load_model(path)
    assert model.embed.W_E.dtype == torch.float32
    assert torch.equal(model.embed.W_E, small_model(seed=1).embed.W_E.half().float())


def test_a_timeline_folder_reads_and_loads(snapshots):
    tl = read_timeline(snapshots)
    assert tl.steps == [0, 10, 100] and tl.valid_loss == [5.1, 4.2, 3.3] and tl.snapshots[2].name == "step_000100.safetensors"
    loaded = load_timeline(snapshots)
    assert len(loaded.models) == 3 and loaded.tokenizer is not None
    x = torch.tensor([[1, 2, 3]])
    assert torch.allclose(loaded.models[2](x), small_model(seed=2)(x), atol=0.05)  # float16-rounded weights


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(snapshots=d["snapshots"][:2]), "snapshots must be a list of 3"),
    (lambda d: d.update(valid_loss=[1.0, 2.0]), "valid_loss must be null or a list of 3"),
    (lambda d: d.update(train_loss=[1.0, float("nan"), 2.0]), "train_loss"),
    (lambda d: d.update(steps=[0, 10, 10]), "strictly increasing"),
    (lambda d: d.update(steps=[0, True, 100]), "integers"),
    (lambda d: d.update(steps="0 10 100"), "steps must be a list"),
    (lambda d: d["snapshots"].__setitem__(1, "../outside.safetensors"), "leaves the timeline's folder"),
    (lambda d: d["snapshots"].__setitem__(1, "/etc/passwd"), "leaves the timeline's folder"),
    (lambda d: d["snapshots"].__setitem__(1, "missing.safetensors"), "does not exist"),
    (lambda d: d["snapshots"].__setitem__(1, d["snapshots"][0]), "listed twice"),
    (lambda d: d.update(scores={"induction": [[[0.5]], [[0.5]]]}), "scores"),
    (lambda d: d.update(scores={"induction": [[[0.5]], [[0.5]], [[1.5]]]}), "scores"),
    (lambda d: d.update(format="other"), "not a viz-timeline"),
])
def test_bad_timeline_json_gives_one_line(snapshots, tmp_path, change, message):
    with pytest.raises(CheckpointError, match=message) as info:
        read_timeline(_edit(snapshots, tmp_path, change))
    assert "\n" not in str(info.value) and isinstance(info.value, ValueError)


def test_not_json_and_links_out_of_the_folder(snapshots, tmp_path):
    with pytest.raises(CheckpointError, match="not valid JSON"):
        read_timeline(_broken(tmp_path))
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(b"x")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "in.safetensors").symlink_to(outside)
    (linked / "timeline.json").write_text(json.dumps({"steps": [0], "snapshots": ["in.safetensors"]}))
    with pytest.raises(CheckpointError, match="leads out of the timeline's folder"):
        read_timeline(linked)


def _broken(tmp_path):
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "timeline.json").write_text('{"steps": [0, 1,')
    return bad


def test_step_named_checkpoints_without_timeline_json(snapshots, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "step-1000.safetensors").symlink_to(snapshots / "step_000100.safetensors")
    os.link(snapshots / "step_000000.safetensors", folder / "step_000010.safetensors")
    (folder / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="no timeline.json and no checkpoints"):
        read_timeline(_empty(tmp_path))
    tl = read_timeline(folder)
    assert tl.steps == [10] and tl.train_loss is None  # a link is never followed out of a step-named folder
    (folder / "step-1000.safetensors").unlink()
    os.link(snapshots / "step_000100.safetensors", folder / "step-1000.safetensors")
    os.link(snapshots / "step_000010.safetensors", folder / "step_10.bin")
    with pytest.raises(CheckpointError, match="two checkpoints for step 10"):
        read_timeline(folder)
    (folder / "step_10.bin").unlink()
    assert read_timeline(folder).steps == [10, 1000]
    archive = tmp_path / "run.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in folder.iterdir():
            z.write(f, f"run/{f.name}")
    loaded = load_timeline_upload("run.zip", archive.read_bytes())
    assert loaded.timeline.steps == [10, 1000] and len(loaded.models) == 2


def _empty(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


def test_hostile_zips_are_refused_in_one_line(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("../step-1.safetensors", b"x")
    for call in (lambda: load_timeline(archive), lambda: load_timeline_upload("evil.zip", archive.read_bytes()),
                 lambda: load_timeline_upload("evil.tar", b"x")):
        with pytest.raises(CheckpointError) as info:
            call()
        assert "\n" not in str(info.value)


def test_log_spaced_steps_and_phase_change():
    steps = log_spaced_steps(4500, 30)
    assert steps[0] == 0 and steps[-1] == 4500 and len(steps) >= 30 and steps == sorted(set(steps))
    gaps = np.diff(steps)
    assert gaps[0] == 1 and gaps[-1] > 500  # dense early, sparse late
    assert phase_change([0, 10, 20, 30], [0.02, 0.03, 0.6, 0.9]) == (10, 20)
    assert phase_change([0, 10, 20], [0.02, 0.1, 0.2]) is None  # no rise of 0.3
    with pytest.raises(ValueError):
        log_spaced_steps(5, 10)


# ------------------------------------------------------------------------------------------ the shipped timeline


@pytest.fixture(scope="module")
def shipped():
    """The shipped timeline.json and every snapshot, each loaded on its own with load_model."""
    data = json.loads((SHIPPED / "timeline.json").read_text(encoding="utf-8"))
    return data, [load_model(SHIPPED / name)[0] for name in data["snapshots"]]


def scores_by_hand(model, length: int = 50, seed: int = 0) -> dict[str, np.ndarray]:
    """Induction and previous-token scores [n_layers, n_heads] from the model's own attention on a random sequence
    of ``length`` ids repeated twice, computed here (not with viz_model.head_scores)."""
    half = torch.randint(0, model.cfg.d_vocab, (1, length), generator=torch.Generator().manual_seed(seed))
    _, cache = model.run_with_cache(torch.cat([half, half], 1), names_filter=lambda n: n.endswith("hook_pattern"))
    pats = np.stack([cache[f"blocks.{layer}.attn.hook_pattern"][0].numpy() for layer in range(model.cfg.n_layers)])
    second = np.arange(length, 2 * length)  # each token of the second copy looks at the token after its first occurrence
    after_first = second - length + 1
    every = np.arange(1, 2 * length)
    return {"induction": pats[:, :, second, after_first].mean(-1), "previous-token": pats[:, :, every, every - 1].mean(-1)}


def test_shipped_snapshots_scores_recomputed_from_their_own_attention(shipped):
    data, models = shipped
    assert len(models) == len(data["steps"]) >= 30 and data["steps"][0] == 0
    best = []
    for i, model in enumerate(models):
        mine = scores_by_hand(model)
        for kind in ("induction", "previous-token"):
            np.testing.assert_allclose(mine[kind], data["scores"][kind][i], atol=2e-4, err_msg=f"{kind}, snapshot {i}")
        best.append(mine["induction"].max())
    assert best[0] < 0.15 and best[-1] >= 0.5
    # the card's table row of every snapshot: step | train loss | valid loss | best induction | best previous-token
    card = (SHIPPED / "README.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1:-1] for line in card.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r[0].replace(",", "")) for r in rows] == data["steps"]
    np.testing.assert_allclose([float(r[3]) for r in rows], best, atol=6e-4)
    np.testing.assert_allclose([float(r[2]) for r in rows], data["valid_loss"], atol=6e-4)
    middle = (best[0] + max(best)) / 2  # the phase change: the first snapshot at half the rise, and the one before
    j = next(j for j, b in enumerate(best) if b >= middle)
    assert data["phase_change"] == [data["steps"][j - 1], data["steps"][j]]
    assert f"between step {data['steps'][j - 1]:,} and step {data['steps'][j]:,}" in card


def test_shipped_losses_fall_and_the_folder_is_small(shipped):
    data, _ = shipped
    assert data["valid_loss"][-1] < data["valid_loss"][0] - 2.0 and data["train_loss"][-1] < data["train_loss"][0] - 2.0
    assert min(data["valid_loss"][-5:]) == pytest.approx(min(data["valid_loss"]), abs=0.05)  # no late blow-up
    size = sum(f.stat().st_size for f in SHIPPED.iterdir())
    assert size <= 40 * 2**20, f"{size / 2**20:.1f} MB"


def test_timeline_page_shows_the_snapshots_own_numbers(shipped):
    data, models = shipped
    steps = data["steps"]
    i = len(steps) * 2 // 3
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    for name, value in dict(train_step=steps[i], tl_layer=1, tl_head=2, text="Tom had a red ball.").items():
        at.query_params[name] = str(value)  # a link that opens this view
    at.run()
    at.switch_page("pages/timeline.py").run()
    assert not at.exception, [e.value for e in at.exception]
    scrubber = component_data(at, "tl_step")
    assert scrubber["index"] == i and scrubber["labels"] == [f"{s:,}" for s in steps]
    assert scrubber["window"] == [0, len(steps)]  # at this length every step's frames are in the browser
    # the numbers under the scrubber, one per step: the timeline's own losses, the best scores of its snapshots
    metrics = {m["label"]: m for m in scrubber["metrics"]}
    for label, values in (("Train loss (nats/token)", data["train_loss"]), ("Validation loss (nats/token)", data["valid_loss"])):
        np.testing.assert_allclose([float(v) for v in metrics[label]["values"]], values, atol=5e-4)
        assert metrics[label]["tones"][i] == "good" and f"{values[i] - values[0]:+.3f}" in metrics[label]["deltas"][i]
    best = np.array(data["scores"]["induction"]).reshape(len(steps), -1)
    np.testing.assert_allclose([float(v) for v in metrics["Best induction score"]["values"]], best.max(1), atol=0.006)
    layer, head = divmod(int(best[-1].argmax()), 4)
    assert metrics["Best induction score"]["deltas"][-1] == f"layer {layer}, head {head}"

    # each step's charts as the browser draws them (the step's frame on the chart's figure): the snapshot's own numbers
    tok = load_model(SHIPPED / data["snapshots"][0])[1]
    ids = tok.encode("Tom had a red ball.\nTom had a red ball.").ids
    n = len(ids)
    block = -(-n // 48)  # the grid's tiles are at most 48 cells across: max-pooled over block x block
    tile = -(-n // block)
    gap = max(1, tile // 8)
    for k in (0, i, len(steps) - 1):
        figs = {f["layout"]["title"]["text"]: f for f in shown_figures(at, k)}
        _, cache = models[k].run_with_cache(torch.tensor([ids]))
        pattern = cache["blocks.1.attn.hook_pattern"][0, 2].numpy()
        head_fig = figs[f"Layer 1, head 2 at step {steps[k]:,}"]
        np.testing.assert_allclose(plotly_array(head_fig["data"][0]["z"]), pattern, atol=1e-6)
        assert head_fig["layout"]["title"]["subtitle"]["text"] == (
            f"induction score {data['scores']['induction'][k][1][2]:.2f} · previous-token score "
            f"{data['scores']['previous-token'][k][1][2]:.2f}")
        # the grid's tile of layer 1, head 2: the same pattern (max-pooled when the text is longer than a tile)
        canvas = plotly_array(figs[f"All heads at step {steps[k]:,}"]["data"][0]["z"])
        padded = np.pad(pattern, ((0, tile * block - n), (0, tile * block - n)))
        pooled = padded.reshape(tile, block, tile, block).max(axis=(1, 3))
        np.testing.assert_allclose(canvas[tile + gap:, 2 * (tile + gap):2 * (tile + gap) + tile], pooled, atol=1e-6)
        loss = figs[f"Loss at step {steps[k]:,}"]
        np.testing.assert_allclose(plotly_array(loss["data"][0]["y"]), data["train_loss"])
        np.testing.assert_allclose(plotly_array(loss["data"][1]["y"]), data["valid_loss"])
        circles = [s for s in loss["layout"]["shapes"] if s["type"] == "circle"]  # on each curve at the step's loss
        assert [c["yanchor"] for c in circles] == pytest.approx([data["train_loss"][k], data["valid_loss"][k]])
        assert any(s["type"] == "line" and s["x0"] == max(steps[k], 0.5) for s in loss["layout"]["shapes"])
    curves = {f["layout"]["title"]["text"]: f for f in shown_figures(at)}["Head-type scores across training"]["data"]
    l1h2 = next(t for t in curves if t.get("name") == "L1H2" and t["xaxis"] == "x2")  # the induction panel
    np.testing.assert_allclose(plotly_array(l1h2["y"]), np.array(data["scores"]["induction"])[:, 1, 2], atol=2e-5)

    # the browser reports the step the user stopped on: the page's step, the link and the sample follow it; the
    # charts are the same figures with the same frames (the browser has nothing new to draw)
    charts = {k: component_data(at, k) for k in ("tl_loss_chart", "tl_scores_chart", "tl_grid", "tl_head_chart")}
    report_component_event(at, "tl_step", "step", i + 1)
    assert not at.exception, [e.value for e in at.exception]
    assert component_data(at, "tl_step")["index"] == i + 1 and at.query_params["train_step"] == str(steps[i + 1])
    for key, before in charts.items():
        after = component_data(at, key)
        assert (after["revision"], after.get("framesRevision")) == (before["revision"], before.get("framesRevision")), key
    assert f"What the model writes at step {steps[i + 1]:,}" in [h.value for h in at.subheader]
    written = tok.decode([s.token_id for s in generate(models[i + 1], tok.encode("Tom had a red ball.").ids, 30,
                                                       temperature=0.0)])
    assert any(f"**{plain(' '.join(written.split()), None)}**" in m.value for m in at.markdown)


def test_a_long_text_sends_a_window_of_steps_and_a_step_outside_it_moves_the_window(shipped):
    """At 127 tokens the frames of every step do not fit in the budget: the browser holds a window of steps around
    the one shown; a reported step outside it brings the window there."""
    data, _ = shipped
    steps = data["steps"]
    text = " ".join(["Tom had a red ball and a big dog."] * 6)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    for name, value in dict(train_step=steps[-1], tl_layer=1, tl_head=2, text=text).items():
        at.query_params[name] = str(value)
    at.run()
    at.switch_page("pages/timeline.py").run()
    assert not at.exception, [e.value for e in at.exception]
    lo, hi = component_data(at, "tl_step")["window"]
    assert hi == len(steps) and 0 < lo and hi - lo >= 8
    head = component_data(at, "tl_head_chart")
    assert (head["first"], head["count"]) == (lo, hi - lo) and len(json.loads(head["frames"])) == hi - lo
    report_component_event(at, "tl_step", "step", 0)
    assert not at.exception, [e.value for e in at.exception]
    lo0, hi0 = component_data(at, "tl_step")["window"]
    assert lo0 == 0 and hi0 == hi - lo and component_data(at, "tl_head_chart")["first"] == 0
    assert f"Layer 1, head 2 at step {steps[0]:,}" in {f["layout"]["title"]["text"] for f in shown_figures(at)}


def test_hostile_step_reports_and_an_unrunnable_text_leave_the_page_standing(shipped, monkeypatch):
    """A step report is the browser's word, not to be trusted: anything but a step's position leaves the step as it
    was. A text the timeline's tokenizer cannot run is one line, with and without live charts."""
    data, _ = shipped
    steps = data["steps"]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["train_step"] = str(steps[5])
    at.run()
    at.switch_page("pages/timeline.py").run()
    for value in (-1, len(steps), 10**30, 2.5, float("nan"), True, "7", None, [3], {"step": 3}):
        report_component_event(at, "tl_step", "step", value)
        assert not at.exception, (value, [e.value for e in at.exception])
        assert component_data(at, "tl_step")["index"] == 5 and at.query_params["train_step"] == str(steps[5]), value

    import viz_ui.app.live_chart as live_chart
    import viz_ui.app.timeline as timeline_state

    def refuse(*args):
        raise ValueError("the tokenizer cannot encode this text")
    monkeypatch.setattr(timeline_state, "get_step_view", refuse)
    for live in (True, False):
        if not live:
            monkeypatch.setattr(live_chart, "live_chart_source", lambda: None)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert [e.value for e in at.error] == [
            "The text cannot be run by this timeline's model: the tokenizer cannot encode this text."]
        assert component_data(at, "tl_step")["index"] == 5


def test_a_frame_on_another_steps_figure_is_that_steps_figure():
    """What the browser draws at a step (the chart's figure, built at another step, with the step's frame merged in,
    as viz_ui/live_chart.js does) is the figure built at that step: the grid's tiles and their hovers, the head's
    weights (its hover reads them from z) and titles."""
    import plotly.io as pio

    from conftest import merge_frame
    from viz_ui.views.figures import attention_grid, attention_heatmap
    from viz_ui.views.timeline import grid_frame, head_frame
    rng = np.random.default_rng(0)
    labels = ["<s>", "Tom", " had", " a", " red", " ball", ".", "Tom"] * 8  # 64 tokens: the grid's tiles are pooled
    first, other = (rng.random((2, 3, 64, 64)).astype(np.float32) for _ in range(2))
    for p in (first, other):
        p /= p.sum(-1, keepdims=True)
    patch = dict(title=dict(text="All heads at step 1,650"))
    built = json.loads(pio.to_json(attention_grid(other, labels=labels, patch=patch)[0]))
    base = json.loads(pio.to_json(attention_grid(first, labels=labels, patch=dict(title=dict(text="at step 0")))[0]))
    drawn = merge_frame(base, json.loads(json.dumps(grid_frame(other, labels, "All heads at step 1,650"))))
    assert drawn["layout"] == built["layout"] and drawn["data"][1] == built["data"][1]
    np.testing.assert_array_equal(plotly_array(drawn["data"][0]["z"]), plotly_array(built["data"][0]["z"]))
    assert drawn["data"][1]["text"] != base["data"][1]["text"]  # the strongest pairs differ between the two
    title = dict(text="Layer 1, head 2 at step 1,650", subtitle=dict(text="induction score 0.88"))
    built = json.loads(pio.to_json(attention_heatmap(other[1, 2], labels, "", patch=dict(title=title))))
    base = json.loads(pio.to_json(attention_heatmap(first[1, 2], labels, "", patch=dict(title=dict(text="x")))))
    drawn = merge_frame(base, head_frame(other[1, 2], title["text"], title["subtitle"]["text"]))
    assert drawn["layout"] == built["layout"]
    np.testing.assert_array_equal(plotly_array(drawn["data"][0]["z"]), other[1, 2])
    assert "%{z:.4f}" in drawn["data"][0]["hovertemplate"] and len(drawn["data"][0]["customdata"][0][0]) == 2


def test_frame_window_and_step_metrics():
    from viz_ui.views.timeline import frame_window, step_metrics
    assert frame_window(5, 40, 10, 1000) == (0, 40)  # everything fits
    assert frame_window(0, 40, 100, 1000) == (0, 10) and frame_window(39, 40, 100, 1000) == (30, 40)
    assert frame_window(20, 40, 100, 1000) == (15, 25) and frame_window(3, 40, 10**6, 10) == (3, 4)  # at least one
    scores = {"induction": np.zeros((3, 2, 4)), "previous-token": np.zeros((3, 2, 4))}
    scores["induction"][2, 1, 3] = 0.75
    metrics = step_metrics([0, 10, 100], [5.0, 5.5, 3.0], None, scores)
    assert [m["label"] for m in metrics] == ["Train loss (nats/token)", "Validation loss", "Best induction score",
                                             "Best previous-token score"]
    assert metrics[0]["values"] == ["5.000", "5.500", "3.000"] and metrics[0]["tones"] == ["off", "bad", "good"]
    assert metrics[0]["deltas"][2] == "↓ -2.000 since step 0" and metrics[1]["values"] == ["not recorded"] * 3
    assert metrics[2]["values"][2] == "0.75" and metrics[2]["deltas"][2] == "layer 1, head 3"


def test_scrubber_colours_are_readable_in_both_themes():
    """Every text colour of the step scrubber is at least 4.5:1 on what it is drawn on (WCAG 2.1 AA)."""
    from ui_audit import contrast
    from viz_ui.app.scrubber import BACKGROUNDS, PALETTES

    def rgb(hex_colour: str) -> str:
        return "rgb({}, {}, {})".format(*(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)))

    for theme, c in PALETTES.items():
        pairs = [(c["ink"], BACKGROUNDS[theme]), (c["muted"], BACKGROUNDS[theme]), (c["ink"], c["surface"]),
                 (c["accent"], c["surface"]), (c["muted"], c["off-bg"]), (c["good"], c["good-bg"]), (c["bad"], c["bad-bg"])]
        for fg, bg in pairs:
            assert contrast(rgb(fg), rgb(bg)) >= 4.5, (theme, fg, bg)


def test_figures_built_in_one_pass_equal_figures_styled_afterwards():
    """The timeline page builds its figures styled for the display in one pass (Plotly validates a figure again at
    each update): the same figures as building them, updating their layout, then styling them (show_figure)."""
    import plotly.io as pio

    from viz_ui.views.figures import attention_grid, attention_heatmap, style_for_display
    rng = np.random.default_rng(0)
    labels = ["<s>", "Tom", " had", " a", " red", " ball", ".", "Tom"]
    pattern = rng.random((2, 3, 8, 8)).astype(np.float32)
    patch = dict(title=dict(text="at step 1,650"), margin=dict(l=90, r=117, b=80))
    for scale, theme in ((1.0, "light"), (1.5, "dark")):
        by_hand = attention_heatmap(pattern[1, 2], labels, "head")
        by_hand.update_layout(patch)
        one_pass = attention_heatmap(pattern[1, 2], labels, "head", patch=patch, display=(scale, theme))
        assert json.loads(pio.to_json(one_pass)) == json.loads(pio.to_json(style_for_display(by_hand, scale, theme)))
        by_hand = attention_grid(pattern, labels=labels)[0]
        by_hand.update_layout(patch)
        one_pass = attention_grid(pattern, labels=labels, patch=patch, display=(scale, theme))[0]
        assert json.loads(pio.to_json(one_pass)) == json.loads(pio.to_json(style_for_display(by_hand, scale, theme)))


def test_timelines_on_the_command_line_and_shipped():
    from viz_ui.app.timeline import command_line_timelines, shipped_timelines
    assert command_line_timelines(["--model", "m.safetensors", "--timeline", "runs/mine/", "--timeline", "b.zip"]) == {
        "mine": "runs/mine/", "b.zip": "b.zip"}
    assert shipped_timelines() == {"induction-2l": str(SHIPPED)}


def test_without_live_charts_the_page_shows_the_same_figures(shipped, monkeypatch):
    """Where the server cannot serve Plotly's code for live charts (static serving off, or no writable static/), the
    page shows the step's figures with st.plotly_chart (the losses' figure with the step's marks drawn in) and the
    scrubber reports every step at once, for the server to draw it."""
    import viz_ui.app.live_chart as live_chart
    monkeypatch.setattr(live_chart, "live_chart_source", lambda: None)
    data, _ = shipped
    steps = data["steps"]
    i = len(steps) // 2
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["train_step"] = str(steps[i])
    at.run()
    at.switch_page("pages/timeline.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [c.proto.id.rsplit("-", 1)[1] for c in at.get("bidi_component")] == ["tl_step"]
    assert component_data(at, "tl_step")["immediate"] is True
    for k in (i, i + 1):
        figs = {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
                for c in at.get("plotly_chart")}
        loss = figs[f"Loss at step {steps[k]:,}"]
        circles = [s for s in loss["layout"]["shapes"] if s["type"] == "circle"]
        assert [c["yanchor"] for c in circles] == pytest.approx([data["train_loss"][k], data["valid_loss"][k]])
        assert f"All heads at step {steps[k]:,}" in figs and "Head-type scores across training" in figs
        report_component_event(at, "tl_step", "step", i + 1)
        assert not at.exception, [e.value for e in at.exception]


def test_plotly_code_for_live_charts_is_the_plotly_packages_own(tmp_path, monkeypatch):
    import viz_ui.app.preload as preload
    monkeypatch.setattr(preload, "STATIC", tmp_path / "static")
    url = preload._install()
    name = url.rsplit("/", 1)[1]
    assert url == f"app/static/{name}" and preload.plotly.__version__ in name
    assert (tmp_path / "static" / name).read_bytes() == preload.PLOTLY_JS.read_bytes()
    (tmp_path / "a file").write_text("")
    monkeypatch.setattr(preload, "STATIC", tmp_path / "a file" / "static")  # cannot be created: no live charts
    assert preload._install() is None
    # the preload's script survives st.html's DOMPurify, which drops a script holding "<" before a letter or "/"
    assert "<" not in preload.LOADER_CODE and "function loadPlotly(src)" in preload.LOADER_CODE
    assert "<" not in preload.RECOVER_CODE and "Bad delta path index" in preload.RECOVER_CODE


def test_component_code_travels_without_comments_and_indentation():
    """A component's code goes inline into each of its elements at every run: the live chart's is sent compacted,
    every statement kept in order (the browser tests draw with it)."""
    from pathlib import Path

    from viz_ui.app import live_chart, preload
    source = preload.LOADER_JS + "\n" + Path(live_chart.__file__).with_name("live_chart.js").read_text()
    sent = live_chart._JS.splitlines()
    assert not [line for line in sent if line != line.strip() or not line or line.startswith("//")]
    assert len(live_chart._JS) < 0.7 * len(source) and "export default function (component) {" in sent
    statements = iter(sent)  # every line of code, in its order
    assert all(any(line.strip() == s for s in statements)
               for line in source.splitlines() if line.strip() and not line.strip().startswith("//"))
    assert preload.compact_js("  a = 1; // one\n\n  // gone\n\tif (a) {\n    b();\n  }\n") == "a = 1; // one\nif (a) {\nb();\n}"
