"""Train your own: a tiny model trained live on the server from a text the user brings, with its loss and the
attention of one head on a probe text redrawn while it learns; the result becomes this session's model."""

import math
import uuid

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_model import CheckpointError
from viz_model.training.live import (REGISTRY, SHIPPED_TEXT, TrainingRefused, TrainSettings, ServerBusy, check_size,
                                     setting)
from viz_ui.views.figures import attention_heatmap
from viz_ui.app.layout import EXAMPLES, set_shared, show_figure, show_link, side_by_side
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.state import add_session_model, upload_hash
from viz_ui.app.timeline import add_session_timeline
from viz_ui.analysis.text import error_line, plain
from viz_ui.views.train import loss_figure, model_name, probe_pattern, size_text, status_text

SOURCES = {"shipped": "the shipped stories (TinyStories, 200 KB)", "paste": "a text you paste",
           "upload": "a .txt file you upload"}
STEPS = [20, 50, 100, 200, 300, 500, 1000, 2000, 3000]
POLL_SECONDS = 1.0
PROBE = "The cat sat on the mat. The cat sat on the mat."


def adopt(job) -> None:
    """Make a finished job's model this session's model on every page (once per job); note the outcome."""
    ss, p = st.session_state, job.progress()
    if ss.get("_train_adopted") == job.id:
        return
    ss["_train_adopted"] = job.id
    if p.status == "failed":
        ss["_train_message"] = ("error", f"The training failed: {plain(error_line(p.error or 'unknown error', 300))}.")
        return
    if p.step < 1:
        ss["_train_message"] = ("info", "The training stopped before its first step: there is no model to use.")
        return
    name = model_name(job.source, job.settings, p.step)
    add_session_model(upload_hash(job.id.encode(), str(p.step).encode()), name, job.latest_model(), job.tokenizer,
                      job.source)
    set_shared("model", name)
    ending = {"done": "", "cancelled": " (cancelled)", "timed out": " (stopped at the time limit)"}[p.status]
    ss["_train_message"] = ("success", f"Trained for {p.step:,} steps{ending}: **{plain(name)}** is now this "
                            "session's model on every page (sidebar → Model).")


def pick_text(running: bool, max_chars: int) -> tuple[str | None, str]:
    """The text to learn from (the shipped stories, a pasted text or an uploaded file) and its label; the text is
    None until there is one."""
    st.subheader("1 · Text to learn from")
    source = st.radio("Text", list(SOURCES), format_func=SOURCES.get, key="train_source", horizontal=True,
                      disabled=running, label_visibility="collapsed")
    text, label = None, "shipped stories"
    if source == "shipped":
        text = SHIPPED_TEXT.read_text(encoding="utf-8")
        st.caption("The first 246 stories of TinyStories (Eldan & Li, 2023; CDLA-Sharing-1.0), the text the shipped "
                   f"model saw first: {len(text):,} characters.")
    elif source == "paste":
        text = st.text_area("Your text", key="train_text", height=160, max_chars=max_chars, disabled=running,
                            placeholder=EXAMPLES[0] + " …")
        label = "pasted text"
        st.caption(f"At least a few thousand characters give a model something to learn; up to {max_chars:,}.")
    else:
        upload = st.file_uploader("A plain-text file (UTF-8)", type=["txt"], key="train_upload", disabled=running,
                                  max_upload_size=max(1, 4 * max_chars // 2**20))
        if upload is not None:
            text = upload.getvalue().decode("utf-8", errors="replace")
            label = upload.name
            st.caption(f"{plain(upload.name)}: {len(text):,} characters.")
    return text, label


def pick_settings(ctx: PageContext, running: bool) -> tuple[TrainSettings, str | None]:
    """The model's size and the training's settings, and why they are too large (None when they are not)."""
    st.subheader("2 · Model size and training")
    c1, c2, c3, c4, c5 = st.columns(5) if not ctx.lecture else (st.columns(3) + st.columns(2))
    n_layers = c1.slider("Layers", 1, 4, 2, key="train_layers", disabled=running)
    n_heads = c2.selectbox("Heads per layer", [1, 2, 4, 8], index=2, key="train_heads", disabled=running)
    d_model = c3.selectbox("Width d_model", [32, 64, 128, 192, 256], index=2, key="train_width", disabled=running)
    n_ctx = c4.selectbox("Context (tokens)", [16, 32, 64, 128, 256], index=2, key="train_ctx", disabled=running)
    steps = c5.select_slider("Steps", STEPS, value=500, key="train_steps", disabled=running)
    with st.expander("More settings"):
        a1, a2, a3 = st.columns(3)
        vocab = a1.selectbox("Vocabulary (BPE tokens, at most)", [300, 512, 1024, 2048, 4096], index=1, key="train_vocab",
                             disabled=running)
        lr = a2.select_slider("Peak learning rate", [3e-4, 1e-3, 3e-3, 1e-2], value=3e-3, key="train_lr", disabled=running,
                              format_func=lambda v: f"{v:g}")
        seed = a3.number_input("Seed", 0, 10_000, 0, key="train_seed", disabled=running)
        st.caption("Batches of 16 random windows of the context's length; AdamW with a linear warm-up and cosine decay "
                   "(the same loop as the training command, python -m viz_model.training); 10 % of the text is held out to measure the "
                   "loss on text the model never trained on.")
    settings = TrainSettings(n_layers=n_layers, n_heads=n_heads, d_model=d_model, n_ctx=n_ctx, steps=steps,
                             vocab_size=vocab, lr=lr, seed=int(seed))
    size_error = None
    try:
        check_size(settings)
    except TrainingRefused as exc:
        size_error = str(exc)
    st.caption(plain(size_text(settings), limit=None) + ". The defaults train in about a minute on two CPU cores; a "
               f"training stops after {setting('VIZ_MAX_TRAIN_SECONDS'):,.0f} s whatever the steps.")
    if size_error:
        st.error(f"Too large: {plain(size_error)}.", icon=":material/error:")
    return settings, size_error


def start_or_cancel(job, running: bool, text: str | None, label: str, settings: TrainSettings,
                    size_error: str | None) -> None:
    """The Start and Cancel buttons: a new job of this session, or the running one cancelled."""
    ss = st.session_state
    buttons = st.container(horizontal=True)
    start = buttons.button("Start training", type="primary", icon=":material/play_arrow:", disabled=running or bool(size_error),
                      key="train_start")
    cancel = buttons.button("Cancel", icon=":material/stop:", disabled=not running, key="train_cancel")
    if start:
        session = ss.setdefault("_train_session", uuid.uuid4().hex)
        try:
            new = REGISTRY.start(session, text or "", settings, label)
        except ServerBusy as exc:
            st.warning(f"Not started: {plain(str(exc))}.", icon=":material/hourglass_top:")
        except TrainingRefused as exc:
            st.error(f"Cannot start: {plain(str(exc))}.", icon=":material/error:")
        else:
            ss["_train_job"], ss["_train_adopted"] = new, None
            for key in ("train_layer", "train_head"):  # the new model may have fewer layers or heads
                ss.pop(key, None)
            ss.pop("_train_message", None)
            st.rerun()
    if cancel and job is not None:
        job.cancel()
        job.wait(10)  # cooperative: the loop stops before its next step (well under a second at these sizes)
        st.rerun()


def outcome() -> None:
    """What the last finished training of this session ended with (kept until the next start)."""
    kind, message = st.session_state.get("_train_message", (None, None))
    if kind:
        getattr(st, kind)(message, icon={"error": ":material/error:", "info": ":material/info:",
                                         "success": ":material/check_circle:"}[kind])


def probe_view(ctx: PageContext, job, p, newest) -> None:
    """One head's attention on a probe text, with the newest weights or a snapshot's."""
    cfg = newest.cfg
    probe = st.text_input("Probe text", value=PROBE, key="train_probe", max_chars=2_000)
    h1, h2 = st.columns(2)
    layer = h1.selectbox("Layer", range(cfg.n_layers), index=cfg.n_layers - 1, key="train_layer")
    head = h2.selectbox("Head", range(cfg.n_heads), key="train_head")
    # the snapshots (a timeline); the last one is the newest model itself (float32), earlier ones float16
    options = [*p.snapshot_steps[:-1], "newest"] if p.running else p.snapshot_steps
    shown = st.select_slider("Weights after step", options, value=options[-1], disabled=len(options) < 2,
                             key=f"train_snapshot_{'live' if p.running else job.id}",
                             format_func=lambda v: f"newest ({p.step:,})" if v == "newest" else f"{v:,}")
    at_end = shown == "newest" or shown == p.snapshot_steps[-1]
    model = newest if at_end else job.snapshot_model(p.snapshot_steps.index(shown))
    step = p.step if at_end else shown
    if not probe.strip():
        st.info("Type a probe text to see the head's attention on it.")
        return
    try:
        matrix, labels = probe_pattern(model, job.tokenizer, probe, layer, head)
    except ValueError as exc:
        st.error(f"The probe text cannot be run: {plain(error_line(exc))}.")
        return
    fig = attention_heatmap(matrix, labels, f"Layer {layer}, head {head}, step {step:,}")
    if not ctx.lecture:  # a square map in half the page: more height would only add space around it
        fig.update_layout(height=min(fig.layout.height, 560))
    show_figure(fig, ctx.app, "training_attention")
    st.caption(("The newest weights, redrawn every few steps while training runs. " if p.running else "")
               + "A repeated sentence lets an induction head show itself: tokens of the second copy look at the "
               "token after their first copy.")


def live_view(ctx: PageContext, job, running: bool) -> None:
    """Progress, loss curve and the probe's attention; a fragment redrawn every POLL_SECONDS while the job runs
    (``running``); when it ends, the whole page runs again (the model is adopted, the controls come back)."""
    ctx.app.shown_link = ""  # the fragment redraws the sidebar's link (see pages/output.py)
    p = job.progress()
    if running and not p.running:
        st.rerun(scope="app")
    st.progress(min(1.0, p.step / max(1, p.steps)), text=plain(status_text(p)))
    if p.status == "failed":
        st.error(f"The training failed: {plain(error_line(p.error or 'unknown error', 300))}.", icon=":material/error:")
        return
    left, right = side_by_side(ctx.app, [1, 1])
    with left:
        show_figure(loss_figure(p), ctx.app, "training_loss")
        if p.snapshot_steps:
            kept = ", ".join(map(str, p.snapshot_steps[:6])) + ("…" if len(p.snapshot_steps) > 6 else "")
            st.caption(f"Blue: the loss of each step's batch. Red: the loss on the held-out 10 % at the "
                       f"{len(p.snapshot_steps)} snapshots kept{' so far' if p.running else ''} (steps {kept}). "
                       f"ln {p.d_vocab} = {math.log(max(p.d_vocab, 1)):.2f} is guessing uniformly among the "
                       f"{p.d_vocab:,} tokens.")
    with right:
        newest = job.latest_model()
        if newest is None:
            st.info("The tokenizer is being trained; the model appears in a moment.", icon=":material/hourglass_top:")
            return
        probe_view(ctx, job, p, newest)
    show_link(ctx.app)


def after_training(ctx: PageContext, job) -> None:
    """A finished job's snapshots opened as a timeline, and its downloads."""
    after = st.container(horizontal=True)
    if after.button("Watch it learn: open the snapshots on page 6", icon=":material/timelapse:", key="train_open_timeline",
                    help="The snapshots as a training timeline: scrub through the steps, every head's scores "
                         "across training, greedy samples at each step (this session only)."):
        try:
            with st.spinner("Writing and loading the snapshots…"):
                loaded = job.loaded_timeline()
        except (RuntimeError, CheckpointError) as exc:
            st.error(f"The snapshots cannot be opened as a timeline: {plain(error_line(exc))}.")
        else:
            name = model_name(job.source, job.settings, job.progress().step)
            add_session_timeline(upload_hash(job.id.encode(), b"timeline"), name, loaded)
            set_shared("timeline", name)
            st.switch_page("pages/timeline.py")
    if not ctx.lecture:
        after.download_button("Model (.safetensors)", data=job.checkpoint_bytes, file_name="trained-model.safetensors",
                              mime="application/octet-stream", icon=":material/download:", key="train_download",
                              help="A native checkpoint (weights, config and tokenizer in one file): open it with "
                                   "--model, load_model or the Model inspector's upload.")
        after.download_button("Timeline (.zip)", data=job.timeline_zip, file_name="trained-timeline.zip",
                              mime="application/zip", icon=":material/download:", key="train_download_timeline",
                              help="Every snapshot (float16) and timeline.json: open it on page 6 (Open another "
                                   "timeline) or with --timeline.")


job = st.session_state.get("_train_job")
if job is not None and not job.running:
    adopt(job)  # before the sidebar is drawn, so that it already lists and selects the new model
ctx = open_page("Train your own",
                "Train a tiny transformer on a text of your choice, here on the server, and watch it learn: the "
                "loss falls and the attention of its heads takes shape. The result becomes your model on every "
                "page.", needs_trace=False)
running = job is not None and job.running
text, label = pick_text(running, int(setting("VIZ_MAX_TRAIN_CHARS")))
settings, size_error = pick_settings(ctx, running)
start_or_cancel(job, running, text, label, settings, size_error)
outcome()
if job is not None:
    st.subheader("3 · Training")
    # the live view keeps its full colours while its fragment reruns: .st-key-train_live in viz_ui/app/base.css
    with st.container(key="train_live"):
        st.fragment(live_view, run_every=POLL_SECONDS if running else None)(ctx, job, running)
    if not running and job.progress().step >= 1:
        after_training(ctx, job)
else:
    st.info(f"{REGISTRY.running()} of {int(setting('VIZ_MAX_TRAININGS'))} trainings are running on this server now.",
            icon=":material/dns:")
show_link(ctx.app)
