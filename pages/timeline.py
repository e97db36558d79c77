"""Watch it learn: a model saved at many points of its training, scrubbed step by step on the user's own text."""

from typing import NamedTuple

import numpy as np
import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from pathlib import PurePosixPath

from viz_model import CheckpointError
from viz_model.loading.sources import MAX_UPLOAD_MB
from viz_model.loading.timeline import PHASE_RISE, LoadedTimeline, load_timeline_upload, phase_change
from viz_ui.app.layout import (pick_index, selected_points, set_shared, shared_value, shared_widget, show_figure,
                          side_by_side)
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.live_chart import Frames, live_chart_source
from viz_ui.app.scrubber import reported_step, step_scrubber
from viz_ui.app.state import model_card, upload_hash
from viz_ui.analysis.text import error_line, plain, recoverable
from viz_ui.app.timeline import (MAX_SESSION_TIMELINES, MAX_VIEW_TOKENS, UPLOAD_PREFIX, add_session_timeline,
                                   available_timelines, get_grid_figure, get_grid_frames, get_head_figure,
                                   get_head_frames, get_loss_figure, get_loss_frames, get_scores_figure,
                                   get_step_sample, get_step_view, get_timeline_scores, resolve_timeline, step_window)
from viz_ui.views.timeline import step_metrics

PLAY_SECONDS = 1.0  # one snapshot per tick while playing
N_NEW = 30  # greedy tokens generated at each step

class Run(NamedTuple):
    """The chosen timeline (its key, loaded snapshots and head scores) and the text it is shown on."""

    key: str
    loaded: LoadedTimeline
    scores: dict  # score name -> [step, n_layers · n_heads] (viz_ui.app.timeline.get_timeline_scores)
    text: str  # the sidebar's text, stripped
    shown: str  # the text run at every step: ``text``, or ``text`` twice
    live: bool  # the charts follow the scrubber in the browser (else every step change is drawn by the server)

    @property
    def steps(self) -> list[int]:
        return self.loaded.timeline.steps

    @property
    def cfg(self):
        return self.loaded.models[0].cfg

    @property
    def best_induction(self) -> np.ndarray:
        """The best head's induction score at every step, ``[n_steps]``."""
        return self.scores["induction"].reshape(len(self.steps), -1).max(1)


def upload_section() -> None:
    """Open a timeline uploaded as a .zip (kept in this session only)."""
    cap_mb = min(MAX_UPLOAD_MB, int(st.get_option("server.maxUploadSize")))
    with st.expander("Open another timeline (.zip)", icon=":material/upload_file:"):
        st.caption(f"A .zip (up to {cap_mb} MB) of a folder with a timeline.json (steps, snapshots, train_loss, "
                   "valid_loss) and its checkpoints, or of checkpoints whose names carry the step (step-1000, "
                   "step_001000.safetensors). It stays in this browser session only (the last "
                   f"{MAX_SESSION_TIMELINES}); nothing in it is executed. On the command line: "
                   "streamlit run app.py -- --timeline PATH.")
        upload = st.file_uploader("Timeline (.zip)", type=["zip"], key="upload_timeline", max_upload_size=cap_mb)
        if upload is not None and st.session_state.get("_last_timeline_upload") != upload.file_id:
            st.session_state["_last_timeline_upload"] = upload.file_id
            data = upload.getvalue()
            bar = st.progress(0.0, text=f"Loading {plain(upload.name)}…")
            try:  # any failure (a Rust panic too) is one line; Streamlit's rerun/stop signals pass
                uploaded = load_timeline_upload(upload.name, data, lambda f, msg: bar.progress(f, text=plain(msg)), cap_mb)
            except BaseException as exc:
                if not recoverable(exc):
                    raise
                bar.empty()
                reason = str(exc) if isinstance(exc, CheckpointError) else f"{upload.name} cannot be loaded ({error_line(exc)})"
                st.session_state["_timeline_message"] = f"{plain(error_line(reason, 300))}."
            else:
                name = f"{PurePosixPath(upload.name).stem} (upload)"
                set_shared("timeline", name)
                add_session_timeline(upload_hash(data), name, uploaded)
                st.rerun()
        if message := st.session_state.pop("_timeline_message", None):
            st.error(message, icon=":material/error:")


def pick_timeline(column, timelines: dict[str, str]) -> tuple[str, LoadedTimeline] | None:
    """The shared timeline selector: the chosen timeline's name and loaded snapshots; None (with one line) when it
    cannot be loaded."""
    name = shared_widget(column.selectbox, "Timeline", list(timelines), key="timeline", default=next(iter(timelines)),
                         valid=timelines.__contains__,
                         help="The shipped timeline, those given with --timeline, and your uploads (this session only; "
                              "open one with “Open another timeline” at the bottom of the page).")
    try:
        return name, resolve_timeline(timelines[name])
    except CheckpointError as exc:
        st.error(f"The timeline {plain(name)} cannot be loaded: {plain(str(exc))}")
        return None


def describe(name: str, loaded: LoadedTimeline) -> None:
    steps, model = loaded.timeline.steps, loaded.models[0]
    cfg = model.cfg
    kind = "decoder" if cfg.causal else "encoder"
    st.caption(f"**{plain(name)}**: {len(steps)} snapshots from step {steps[0]:,} to step {steps[-1]:,} of one training "
               f"run of a {cfg.n_layers}-layer {kind} with {cfg.n_heads} heads per layer (d_model {cfg.d_model}, "
               f"{model.n_params():,} parameters, context {cfg.n_ctx} tokens).")


def step_reported(steps: list[int]) -> None:
    """on_step_change of the scrubber: the step the browser reports becomes the page's (and the link's)."""
    index = reported_step("tl_step")
    if index is not None and 0 <= index < len(steps):
        set_shared("train_step", steps[index])


def open_head(n_heads: int) -> None:
    """on_select of the all-heads grid: the clicked tile becomes the head shown large."""
    points = selected_points("tl_grid")
    if points and points[0].get("curve_number") == 1:
        layer, head = divmod(points[0]["point_index"], n_heads)
        set_shared("tl_layer", layer)
        set_shared("tl_head", head)


def scrubber(ctx: PageContext, run: Run, metrics) -> tuple[int, object, tuple[int, int], str | None]:
    """The step scrubber (the shared ``train_step``); returns the step's index, the text's view at that step (None
    when this timeline's tokenizer cannot run the text, with the reason), and the window of steps the browser has
    frames for."""
    key, shown, steps, live = run.key, run.shown, run.steps, run.live
    step = shared_value("train_step", steps[-1], valid=lambda v: v in steps, cast=int)
    i = steps.index(step)
    try:  # a text this timeline's tokenizer cannot run: the scrubber and curves still, then one line
        view, error = get_step_view(key, i, shown), None
        window = step_window(key, i, shown) if live else (i, i + 1)
    except ValueError as exc:
        view, window, error = None, (0, len(steps)), str(exc)
    step_scrubber("tl_step", [f"{s:,}" for s in steps], i, "Training step (snapshots, log-spaced)",
                  lambda: step_reported(steps),
                  metrics=metrics, window=window, immediate=not live, theme=ctx.display.theme,
                  play_seconds=PLAY_SECONDS,
                  help="Each position is a saved snapshot, in training order (the steps are log-spaced: dense early on "
                       "and where the induction score moved). Arrow keys move one snapshot; Home and End go to the "
                       "first and the last.",
                  play_help=f"Show the next snapshot every {PLAY_SECONDS:g} s, from the step shown; it stops at the "
                            "last one (press again to start over).")
    return i, view, window, error


def curves(ctx: PageContext, run: Run, i: int) -> None:
    """The losses and the head scores over training, the step ``i`` marked, and the phase change in words."""
    key, tl, best_induction = run.key, run.loaded.timeline, run.best_induction
    phase = phase_change(run.steps, best_induction.tolist())
    display = (ctx.display.scale, ctx.display.theme)  # figures are built styled for the page, in one pass
    legend_rows = 1 if ctx.lecture else 2  # the curves' legends: one row under a full-width figure
    # the charts follow the scrubber in the browser, from frames of every step in the window (viz_ui/app/live_chart.py)
    if tl.train_loss is None and tl.valid_loss is None:
        st.caption("This timeline records no losses (a folder of step-named checkpoints has none).")
        show_figure(get_scores_figure(key, display, legend_rows), ctx.app, "timeline_scores", styled=True,
                    live="tl_scores_chart")
    else:
        loss_col, scores_col = side_by_side(ctx.app, [1.15, 2])
        with loss_col:
            loss_frames = Frames(get_loss_figure(key, display, legend_rows), "tl_step", i, 0, len(run.steps),
                                 get_loss_frames(key)) if run.live else None
            show_figure(get_loss_figure(key, display, legend_rows, i), ctx.app, "timeline_loss", styled=True,
                        live="tl_loss_chart", frames=loss_frames)
        with scores_col:
            show_figure(get_scores_figure(key, display, legend_rows), ctx.app, "timeline_scores", styled=True,
                        live="tl_scores_chart")
    if phase:
        st.caption(f":material/bolt: **Phase change between step {phase[0]:,} and step {phase[1]:,}** (shaded): the first "
                   "snapshot where the best induction score reaches halfway between its first value "
                   f"({best_induction[0]:.2f}) and its highest ({best_induction.max():.2f}). On the losses, the red "
                   "line and the large markers are the step shown. Scores: on a random sequence of tokens repeated "
                   "twice, the mean weight on the previous token (previous-token) and on the token after the current "
                   "token's first occurrence (induction); measured on each snapshot.")
    else:
        st.caption(f"No phase change: the best induction score never rises {PHASE_RISE:g} above its first value "
                   f"({best_induction[0]:.2f}; highest {best_induction.max():.2f}). On the losses, the red line is the "
                   "step shown.")


def attention_on_text(ctx: PageContext, run: Run, i: int, view, window: tuple[int, int]) -> None:
    """Every head's attention on the text at step ``i`` (clickable), and the chosen head's, large."""
    key, shown, cfg, live, scores = run.key, run.shown, run.cfg, run.live, run.scores
    display = (ctx.display.scale, ctx.display.theme)
    n = len(view.labels)
    if view.n_tokens_total > n:
        st.caption(f":material/content_cut: The text has {view.n_tokens_total:,} tokens under this timeline's tokenizer; "
                   f"the first {n:,} are shown ("
                   + ("the model's context)." if n == cfg.n_ctx else f"at most {MAX_VIEW_TOKENS} here)."))
    lo, hi = window
    default_layer, default_head = divmod(int(scores["induction"][-1].argmax()), cfg.n_heads)
    grid_col, pick_col = side_by_side(ctx.app, [3, 2])
    with grid_col:
        grid_frames = Frames(get_grid_figure(key, lo, shown, display), "tl_step", i, lo, hi - lo,
                             get_grid_frames(key, shown, lo, hi)) if live else None
        show_figure(get_grid_figure(key, i, shown, display), ctx.app, "timeline_all_heads",
                    on_select=lambda: open_head(cfg.n_heads), styled=True, live="tl_grid", frames=grid_frames)
    with pick_col:
        layer = pick_index(st, "Layer", "tl_layer", cfg.n_layers, default_layer)
        head = pick_index(st, "Head", "tl_head", cfg.n_heads, default_head)
        st.caption("The head shown below, with its scores at the step shown under its title. It opens on the head "
                   "with the highest induction score at the last step; click a head in the grid to show it.")
    head_frames = Frames(get_head_figure(key, lo, shown, layer, head, display), "tl_step", i, lo, hi - lo,
                         get_head_frames(key, shown, layer, head, lo, hi)) if live else None
    show_figure(get_head_figure(key, i, shown, layer, head, display), ctx.app, f"timeline_L{layer}_H{head}", styled=True,
                live="tl_head_chart", frames=head_frames)


def sample(run: Run, i: int) -> None:
    """The greedy continuation of the text by the snapshot at step ``i``."""
    key, text, step = run.key, run.text, run.steps[i]
    st.subheader(f"What the model writes at step {step:,}")
    try:
        continuation, used, total = get_step_sample(key, i, text, N_NEW)
    except ValueError as exc:
        st.error(f"No sample: {plain(str(exc))}.")
    else:
        st.markdown(f"Greedy continuation (temperature 0, {N_NEW} tokens) of your text"
                    + (f" (its last {used} tokens)" if used < total else "") + ":")
        written = " ".join(continuation.split())  # bold needs no space inside its ** marks
        space = " " if continuation[:1].isspace() else ""
        st.markdown(f"{'…' if len(text) > 200 else ''}{plain(text[-200:], None)}{space}"
                    + (f"**{plain(written, None)}**" if written else "*(only white space)*"))


@st.fragment
def at_step(ctx: PageContext, run: Run, metrics: list[dict]) -> None:
    """Everything that depends on the step, as a fragment. A step change is drawn in the browser at once (the
    scrubber and the charts' frames); the server hears of it when the user pauses, and reruns only this.
    ``metrics``: the scrubber's numbers at every step (:func:`viz_ui.views.timeline.step_metrics`)."""
    ctx.app.shown_link = ""  # redraw the sidebar's link from this fragment too (see pages/output.py)
    i, view, window, error = scrubber(ctx, run, metrics)
    curves(ctx, run, i)
    st.subheader("Attention on your text")
    if view is None:
        st.error(f"The text cannot be run by this timeline's model: {plain(error)}.")
        return
    attention_on_text(ctx, run, i, view, window)
    if run.cfg.causal and run.loaded.models[i].has_lm_head:
        sample(run, i)


def timeline_card(key: str) -> None:
    if not key.startswith(UPLOAD_PREFIX) and (card := model_card(key)):
        with st.expander("Timeline card (data, recipe, every snapshot's numbers)", icon=":material/description:"):
            st.markdown(card)


def open_run(ctx: PageContext) -> Run | None:
    """The timeline selector, its description and the "twice" toggle; None (after its message) when there is no
    timeline that loads, or no text."""
    timelines = available_timelines()
    if not timelines:
        st.info("No timeline is available: the shipped one lives in assets/timelines/; give one with `--timeline PATH`, "
                "or upload a .zip below.")
        return None
    top = st.columns([3, 1.3], vertical_alignment="bottom")
    picked = pick_timeline(top[0], timelines)
    if picked is None:
        st.stop()
    name, loaded = picked
    key = timelines[name]
    scores = get_timeline_scores(key)
    describe(name, loaded)
    repeat = top[1].toggle("Show my text twice", value=True, key="tl_repeat",
                           help="Your text, a line break, and your text again (cut to the model's context). An "
                                "induction head shows on text that repeats: in the second copy each token looks at the "
                                "token that followed its first occurrence.")
    text = ctx.text.strip()
    if not text:
        return None
    return Run(key, loaded, scores, text, f"{text}\n{text}" if repeat else text, live_chart_source() is not None)


ctx = open_page("Watch it learn",
                "A small transformer saved at many points of its training. Move the step (or press Play) and "
                "watch its attention heads form, on your own text: the losses fall, and at one moment a head "
                "learns to copy what came after an earlier occurrence of the current token (an induction head).",
                needs_trace=False)
run = open_run(ctx)
if run is not None:
    at_step(ctx, run, step_metrics(run.steps, run.loaded.timeline.train_loss, run.loaded.timeline.valid_loss,
                                   run.scores))
    timeline_card(run.key)
upload_section()
