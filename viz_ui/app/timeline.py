"""Streamlit caching glue of the timeline page (the counterpart of :mod:`viz_ui.app.state` for training timelines):
timelines loaded once per server process (shipped ones and ``--timeline`` ones) or kept in one session (uploads),
their head-type scores, each snapshot's attention and greedy sample of a text, and the page's figures of each
snapshot (built once per display: a step change revisited sends figures already built)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

from viz_model import CheckpointError, VizTransformer
from viz_model.sampling import generate
from viz_model.tokenizer import IdTokenizer
from viz_model.loading.timeline import TIMELINE_FILE, LoadedTimeline, load_timeline, phase_change, snapshot_scores

from viz_ui.views.figures import attention_grid, attention_heatmap, grid_tiles
from viz_ui.views.timeline import (curves_height, frame_window, grid_frame, grid_margins, head_frame, head_margins, loss_curves,
                            loss_step, score_curves)
from viz_ui.analysis.text_trace import encode_text, token_label, tokenizer_errors

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "assets" / "timelines"
UPLOAD_PREFIX = "upload:"
MAX_SESSION_TIMELINES = 2  # uploaded timelines kept per browser session (each holds every snapshot in memory)
MAX_VIEW_TOKENS = 128  # tokens of the text the page shows (viz_ui.app.layout.SQUARE_SIDE: a head's map shows every cell)


def command_line_timelines(argv: list[str] | None = None) -> dict[str, str]:
    """Timelines given on the command line: ``streamlit run app.py -- --timeline PATH [--timeline PATH2]``
    (a folder or a ``.zip`` of one), name → path."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--timeline", action="append", default=[])
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return {Path(p.rstrip("/")).name or p: p for p in args.timeline}


def shipped_timelines() -> dict[str, str]:
    """The folders of ``assets/timelines`` that hold a ``timeline.json``, name → path."""
    return {p.parent.name: str(p.parent) for p in sorted(SHIPPED.glob(f"*/{TIMELINE_FILE}"))}


def session_timelines() -> dict[str, tuple[str, LoadedTimeline]]:
    """This session's uploaded timelines: key (``upload:<sha256>``) → (name, timeline), oldest first."""
    return st.session_state.setdefault("_session_timelines", {})


def add_session_timeline(data_hash: str, name: str, loaded: LoadedTimeline) -> str:
    """Keep an uploaded timeline in this session (the last :data:`MAX_SESSION_TIMELINES`); return its key."""
    key = f"{UPLOAD_PREFIX}{data_hash}"
    kept = session_timelines()
    kept[key] = (name, loaded)
    while len(kept) > MAX_SESSION_TIMELINES:
        kept.pop(next(iter(kept)))
    return key


def available_timelines() -> dict[str, str]:
    """Every timeline this session may open, name → key: command-line ones first, then the shipped ones and this
    session's uploads."""
    found = {**command_line_timelines(), **shipped_timelines()}
    found.update({name: key for key, (name, _) in session_timelines().items()})
    return found


@st.cache_resource(max_entries=4, show_spinner="Loading the timeline's snapshots…")
def get_timeline(path: str) -> LoadedTimeline:
    """Every snapshot of the timeline at ``path``, loaded once per server process and shared (read-only).

    Raises:
        CheckpointError: one line (Streamlit caches no call that raises).
    """
    return load_timeline(path)


def resolve_timeline(key: str) -> LoadedTimeline:
    """The loaded timeline of a key: a path (shared cache) or this session's upload.

    Raises:
        CheckpointError: the timeline cannot be loaded, or the upload belongs to another session.
    """
    if key.startswith(UPLOAD_PREFIX):
        entry = session_timelines().get(key)
        if entry is None:
            raise CheckpointError("this uploaded timeline belongs to another session (upload it again here)")
        return entry[1]
    return get_timeline(key)


def timeline_tokenizer(key: str):
    """The timeline's tokenizer, or an :class:`IdTokenizer` when its checkpoints carry none (text = token ids)."""
    loaded = resolve_timeline(key)
    return loaded.tokenizer if loaded.tokenizer is not None else IdTokenizer(loaded.models[0].cfg.d_vocab)


@st.cache_data(max_entries=8, show_spinner="Measuring every head at every step…")
def get_timeline_scores(key: str) -> dict[str, np.ndarray]:
    """Previous-token, duplicate-token and induction scores of every snapshot, measured on the snapshots themselves
    (:func:`viz_model.loading.timeline.snapshot_scores`): kind → ``[n_snapshots, n_layers, n_heads]``."""
    return {k: v.numpy() for k, v in snapshot_scores(resolve_timeline(key).models).items()}


@dataclass(frozen=True)
class StepView:
    """What the timeline page draws of one snapshot over a text: the model's own attention patterns."""

    labels: list[str]  # display form of each token used
    patterns: np.ndarray  # [n_layers, n_heads, query_pos, key_pos] float32, read-only: every layer's hook_pattern
    n_tokens_total: int  # tokens of the text before it was cut


def step_view(model: VizTransformer, tokenizer, text: str) -> StepView:
    """Every layer's ``hook_pattern`` of ``model`` over ``text``, cut to the first :data:`MAX_VIEW_TOKENS` tokens (or
    the model's context, when shorter). Only the patterns are recorded (``names_filter``).

    Raises:
        ValueError: a text the tokenizer cannot encode or spell (one line), or one with no tokens.
    """
    ids = encode_text(tokenizer, text).ids
    if not ids:
        raise ValueError("the text has no tokens")
    used = ids[: min(model.cfg.n_ctx, MAX_VIEW_TOKENS)]
    with tokenizer_errors("the tokenizer cannot spell its tokens"):
        labels = [token_label(tokenizer, i) for i in used]
    _, cache = model.run_with_cache(torch.tensor([used]), names_filter=lambda n: n.startswith("blocks.")
                                    and n.endswith(".attn.hook_pattern"))
    patterns = torch.stack([cache[f"blocks.{i}.attn.hook_pattern"][0] for i in range(model.cfg.n_layers)]).numpy()
    patterns.flags.writeable = False  # shared between sessions
    return StepView(labels, patterns, len(ids))


@st.cache_resource(max_entries=256, ttl=3600, show_spinner=False)
def get_step_view(key: str, index: int, text: str) -> StepView:
    """:func:`step_view` of snapshot ``index`` of the timeline over ``text`` (tokenized by the timeline's tokenizer), a
    shared read-only :class:`StepView`: a first visit of a step costs one small forward pass.

    Raises:
        ValueError: as :func:`step_view`.
    """
    return step_view(resolve_timeline(key).models[index], timeline_tokenizer(key), text)


@st.cache_data(max_entries=256, ttl=3600, show_spinner=False)
def get_step_sample(key: str, index: int, text: str, n_new: int) -> tuple[str, int, int]:
    """The greedy continuation (temperature 0) of ``text`` by snapshot ``index``: ``(continuation text, prompt
    tokens used, tokens of the text)``; the prompt is the text's last ``n_ctx - n_new`` tokens.

    Raises:
        ValueError: a text the tokenizer cannot encode or decode, with one line.
    """
    loaded = resolve_timeline(key)
    model, tokenizer = loaded.models[index], timeline_tokenizer(key)
    ids = encode_text(tokenizer, text).ids
    if not ids:
        raise ValueError("the text has no tokens")
    prompt = ids[-max(1, model.cfg.n_ctx - n_new):]
    steps = generate(model, prompt, n_new, temperature=0.0)
    with tokenizer_errors("the continuation cannot be decoded"):
        return tokenizer.decode([s.token_id for s in steps]), len(prompt), len(ids)


# The page's figures, built styled for a display ``(scale, theme)`` and shared read-only between sessions: show them
# with ``show_figure(..., styled=True)``, which leaves them as they are. Building one costs 5-25 ms (Plotly validates
# it). The figures the browser draws every step on are built at the first step of their frames' window, so that
# they stay the same while the user moves inside it (a new figure is drawn again in full).

FRAME_BUDGET = 600_000  # numbers (float32) in the grid's and the head's frames sent to a browser at once: 2.4 MB


def timeline_phase(key: str) -> tuple[int, int] | None:
    """The phase change of the timeline's best induction score (:func:`viz_model.loading.timeline.phase_change`)."""
    steps, induction = resolve_timeline(key).timeline.steps, get_timeline_scores(key)["induction"]
    return phase_change(steps, induction.reshape(len(steps), -1).max(1).tolist())


@st.cache_resource(max_entries=16, ttl=3600, show_spinner=False)
def get_loss_figure(key: str, display: tuple[float, str], legend_rows: int = 2, index: int | None = None) -> go.Figure:
    """:func:`viz_ui.views.timeline.loss_curves` of the timeline with the marks of snapshot ``index`` (None: without
    marks, the figure the browser draws every step's marks on: :func:`get_loss_frames`)."""
    loaded = resolve_timeline(key)
    tl, cfg = loaded.timeline, loaded.models[0].cfg
    return loss_curves(tl.steps, tl.train_loss, tl.valid_loss, None if index is None else tl.steps[index],
                       timeline_phase(key), curves_height(cfg.n_layers * cfg.n_heads), display, legend_rows)


@st.cache_resource(max_entries=16, ttl=3600, show_spinner=False)
def get_loss_frames(key: str) -> str:
    """The marks of every snapshot on :func:`get_loss_figure`, as frames (:class:`viz_ui.app.live_chart.Frames`, a JSON
    list of layout updates: :func:`viz_ui.views.timeline.loss_step`)."""
    tl = resolve_timeline(key).timeline
    phase = timeline_phase(key)
    return json.dumps([{"layout": loss_step(tl.steps, tl.train_loss, tl.valid_loss, s, phase)} for s in tl.steps])


@st.cache_resource(max_entries=16, ttl=3600, show_spinner=False)
def get_scores_figure(key: str, display: tuple[float, str], legend_rows: int = 2) -> go.Figure:
    """:func:`viz_ui.views.timeline.score_curves` of the timeline: every head's previous-token and induction scores
    across its steps (the same figure at every step)."""
    scores = get_timeline_scores(key)
    return score_curves(resolve_timeline(key).timeline.steps, {k: scores[k] for k in ("previous-token", "induction")},
                        timeline_phase(key), display, legend_rows)


def step_window(key: str, index: int, text: str) -> tuple[int, int]:
    """The snapshots ``[lo, hi)`` whose grid and head frames are sent with snapshot ``index`` over ``text``: all of
    them when they fit in :data:`FRAME_BUDGET` numbers (the shipped timeline's 40 steps do up to 67 tokens; at 127
    tokens, 18 of them).

    Raises:
        ValueError: as :func:`step_view`.
    """
    view = get_step_view(key, index, text)
    canvas = grid_tiles(view.patterns).canvas.size
    return frame_window(index, len(resolve_timeline(key).timeline.steps), canvas + view.patterns[0, 0].size,
                        FRAME_BUDGET)


def grid_title(key: str, index: int) -> str:
    """The title of the all-heads grid at snapshot ``index`` (its figure's and its frame's)."""
    return f"All heads at step {resolve_timeline(key).timeline.steps[index]:,}"


def head_title(key: str, index: int, layer: int, head: int) -> str:
    """The title of one head's figure at snapshot ``index`` (its figure's and its frame's)."""
    return f"Layer {layer}, head {head} at step {resolve_timeline(key).timeline.steps[index]:,}"


def head_subtitle(key: str, index: int, layer: int, head: int) -> str:
    """The head's own scores at snapshot ``index``, as the subtitle of its figure."""
    scores = get_timeline_scores(key)
    return (f"induction score {scores['induction'][index, layer, head]:.2f} · previous-token score "
            f"{scores['previous-token'][index, layer, head]:.2f}")


@st.cache_resource(max_entries=64, ttl=3600, show_spinner=False)
def get_grid_figure(key: str, index: int, text: str, display: tuple[float, str]) -> go.Figure:
    """Every head's attention (:func:`viz_ui.views.figures.attention_grid`) of snapshot ``index`` over ``text``, titled with
    its step; its last trace has one clickable point per head.

    Raises:
        ValueError: as :func:`step_view`.
    """
    view, cfg = get_step_view(key, index, text), resolve_timeline(key).models[index].cfg
    fig, _ = attention_grid(view.patterns, labels=view.labels, display=display,
                            patch=dict(title=dict(text=grid_title(key, index)),
                                       margin=grid_margins(cfg.n_layers, display[0])))
    return fig


@st.cache_resource(max_entries=16, ttl=3600, show_spinner=False)
def get_grid_frames(key: str, text: str, lo: int, hi: int) -> str:
    """The frames of :func:`get_grid_figure` for snapshots ``lo .. hi - 1`` (:func:`viz_ui.views.timeline.grid_frame`),
    as JSON (about 50 KB a snapshot at 64 tokens, 2 x 4 heads).

    Raises:
        ValueError: as :func:`step_view`.
    """
    views = [get_step_view(key, i, text) for i in range(lo, hi)]
    return json.dumps([grid_frame(v.patterns, v.labels, grid_title(key, i)) for i, v in zip(range(lo, hi), views)])


@st.cache_resource(max_entries=64, ttl=3600, show_spinner=False)
def get_head_figure(key: str, index: int, text: str, layer: int, head: int, display: tuple[float, str]) -> go.Figure:
    """The attention of one head (:func:`viz_ui.views.figures.attention_heatmap`) of snapshot ``index`` over ``text``, its
    scores at that step as subtitle.

    Raises:
        ValueError: as :func:`step_view`.
    """
    view = get_step_view(key, index, text)
    title = dict(text=head_title(key, index, layer, head),
                 subtitle=dict(text=head_subtitle(key, index, layer, head), font=dict(size=round(15 * display[0]))))
    return attention_heatmap(view.patterns[layer, head], view.labels, title["text"],
                             patch=dict(margin=dict(head_margins(view.labels, display[0]), t=84), title=title),
                             display=display)


@st.cache_resource(max_entries=16, ttl=3600, show_spinner=False)
def get_head_frames(key: str, text: str, layer: int, head: int, lo: int, hi: int) -> str:
    """The frames of :func:`get_head_figure` for snapshots ``lo .. hi - 1`` (:func:`viz_ui.views.timeline.head_frame`),
    as JSON (about 21 KB a snapshot at 64 tokens).

    Raises:
        ValueError: as :func:`step_view`.
    """
    return json.dumps([head_frame(get_step_view(key, i, text).patterns[layer, head], head_title(key, i, layer, head),
                                  head_subtitle(key, i, layer, head)) for i in range(lo, hi)])
