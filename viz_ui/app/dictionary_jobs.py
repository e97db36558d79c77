"""Dictionaries made in the page (Streamlit glue): train sparse dictionaries for the loaded model in the background
(:class:`viz_model.features.job.DictionaryJob`, with the Train your own page's limits, registry, progress and
cancellation), download a trained set as a ``.zip``, and upload a ``.zip`` of SAELens dictionary folders
(:func:`viz_model.features.upload.unpack_dictionaries`). A finished or uploaded set joins this session's sets for the
model (:func:`viz_ui.app.features.add_session_set`), which the Features and Steering pages list.

One public function, :func:`manage_dictionaries`, draws it all; the Features and Steering pages call it (and
:func:`adopt_finished` before they list the sets).
"""

from __future__ import annotations

import shutil
import uuid

import streamlit as st

from viz_model.features.saelens import DictionaryError
from viz_model.features.job import DictionaryJob, DictSettings, check_size
from viz_model.features.upload import new_set_folder, unpack_dictionaries
from viz_model.loading.sources import MAX_UPLOAD_MB
from viz_model.training.live import REGISTRY, SHIPPED_TEXT, ServerBusy, TrainingRefused, setting
from viz_model.tokenizer import IdTokenizer

from viz_ui.app.features import add_session_set, dictionary_sets
from viz_ui.analysis.text import error_line, plain

SOURCES = {"shipped": "the shipped stories (TinyStories, 120 KB)", "paste": "a text you paste",
           "upload": "a .txt file you upload"}
WIDTHS = [256, 512, 1024, 2048, 4096, 8192]
KS = [8, 16, 32, 64]
STEPS = [50, 100, 200, 300, 500, 1000, 2000]
POLL_SECONDS = 1.0
JOB, ADOPTED, MESSAGE, UPLOADED = "_dict_job", "_dict_adopted", "_dict_message", "_dict_uploaded"
STATUS_WORDS = {"preparing": "Collecting activations", "training": "Training", "done": "Done",
                "cancelled": "Cancelled", "timed out": "Stopped at the time limit", "failed": "Failed"}
ss = st.session_state


def set_label(job: DictionaryJob, n_written: int) -> str:
    """The name a trained set gets in the set list, e.g. ``trained: 2 layers, 1,024 features, k 32, 300 steps on
    shipped stories``."""
    s = job.settings
    what = "transcoders" if s.kind == "transcoder" else "SAEs"
    return (f"trained {what}: {n_written} layer{'s' if n_written != 1 else ''}, {s.d_sae:,} features, k {s.k}, "
            f"{s.steps:,} steps on {job.source[:40]} ({job.id[:6]})")


def _adopt(job: DictionaryJob, model_path: str) -> None:
    """Register a finished job's dictionaries as a set of this session (once per job) and note the outcome."""
    if ss.get(ADOPTED) == job.id:
        return
    ss[ADOPTED] = job.id
    p = job.progress()
    if p.status == "failed":
        ss[MESSAGE] = ("error", f"The training failed: {plain(p.error or 'unknown error')}.")
        return
    if not p.written:
        ss[MESSAGE] = ("info", "The training stopped before a dictionary was trained: nothing was kept.")
        return
    label = set_label(job, len(p.written))
    add_session_set(model_path, label, [str(f) for f in job.folders()])
    ending = {"done": "", "cancelled": " (cancelled: the layers trained so far)",
              "timed out": " (stopped at the time limit: the layers trained so far)"}[p.status]
    quality = "; ".join(f"{h}: training FVU {f:.3f}, dead {d:.0%}" for h, f, d in zip(p.written, p.fvu, p.dead))
    ss[MESSAGE] = ("success", f"{len(p.written)} dictionar{'ies' if len(p.written) != 1 else 'y'} trained{ending}: "
                   f"**{plain(label)}** is in the dictionary list. {plain(quality)}.")


def _text_input(running: bool) -> tuple[str | None, str]:
    source = st.radio("Text to train on", list(SOURCES), format_func=SOURCES.get, key="dict_source", horizontal=True,
                      disabled=running)
    max_chars = int(setting("VIZ_MAX_TRAIN_CHARS"))
    if source == "shipped":
        return SHIPPED_TEXT.read_text(encoding="utf-8"), "shipped stories"
    if source == "paste":
        return st.text_area("Your text", key="dict_text", height=120, max_chars=max_chars, disabled=running), "pasted text"
    upload = st.file_uploader("A plain-text file (UTF-8)", type=["txt"], key="dict_text_upload", disabled=running,
                              max_upload_size=max(1, 4 * max_chars // 2**20))
    if upload is None:
        return None, "uploaded text"
    return upload.getvalue().decode("utf-8", errors="replace"), upload.name


def _train_part(state, job: DictionaryJob | None) -> None:
    model, path = state.model, state.model_path
    cfg = model.cfg
    running = job is not None and job.running
    if not cfg.causal or cfg.is_encoder_decoder:
        st.info("Dictionaries are trained here for decoder-only models; upload one trained elsewhere instead.",
                icon=":material/block:")
        return
    if isinstance(state.tokenizer, IdTokenizer):
        st.info("This checkpoint has no tokenizer: a text cannot become its tokens. Upload its tokenizer.json on the "
                "Model inspector page, or upload dictionaries trained elsewhere.", icon=":material/block:")
        return
    text, label = _text_input(running)
    kind = st.radio("Kind", ["sae", "transcoder"], key="dict_kind", horizontal=True, disabled=running,
                    format_func={"sae": "Sparse autoencoders (the residual stream after a block)",
                                 "transcoder": "Transcoders (a block's MLP: for attribution graphs)"}.get,
                    help="A transcoder reads the MLP's input (blocks.{l}.ln2.hook_normalized) and predicts its output "
                         "(blocks.{l}.hook_mlp_out). The Circuits page builds attribution graphs from one transcoder "
                         "per layer.")
    c1, c2, c3, c4 = st.columns(4) if not state.display.lecture else (st.columns(2) + st.columns(2))
    what = ("one transcoder on blocks.{l}.ln2.hook_normalized → hook_mlp_out each" if kind == "transcoder"
            else "one SAE on blocks.{l}.hook_resid_post each")
    layers = c1.multiselect(f"Layers ({what})", list(range(cfg.n_layers)),
                            default=list(range(cfg.n_layers)) if kind == "transcoder" else [cfg.n_layers // 2],
                            key="dict_layers" if kind == "sae" else "dict_layers_transcoder", disabled=running)
    d_sae = c2.selectbox("Features per dictionary (d_sae)", WIDTHS, index=1, key="dict_width", disabled=running)
    k = c3.selectbox("Active features per token (k)", KS, index=2, key="dict_k", disabled=running)
    steps = c4.select_slider("Steps", STEPS, value=200, key="dict_steps", disabled=running)
    settings = DictSettings(layers=tuple(sorted(layers)), kind=kind, d_sae=d_sae, k=k, steps=steps)
    size_error = None
    try:
        need = check_size(settings, cfg.d_model, cfg.n_layers,
                          model_bytes=sum(p.numel() * p.element_size() for p in model.parameters()))
    except TrainingRefused as exc:
        size_error, need = str(exc), 0
    if kind == "transcoder" and len(layers) < cfg.n_layers:
        st.caption("Attribution graphs need a transcoder for every layer: choose them all to use this set on the "
                   "Circuits page.")
    st.caption(f"TopK {'transcoders' if kind == 'transcoder' else 'sparse autoencoders'} (Gao et al. 2024): Adam on batches of {settings.batch_size:,} token "
               "activations, decoder rows kept at unit norm, an auxiliary loss that revives dead features; the "
               "activations of the first 131,072 tokens of the text, in windows of up to 128 tokens. "
               + (f"About {need / 2**20:,.0f} MB of the {setting('VIZ_MAX_TRAIN_MB'):,.0f} MB this server allows; "
                  if need else "")
               + f"a job stops after {setting('VIZ_MAX_TRAIN_SECONDS'):,.0f} s (the layers finished by then are "
               "kept). Measured here: two layers of 512 features, 200 steps each, on the shipped stories took 105 s on two busy "
               "CPU cores (FVU 0.10 and 0.12 on the last training batch).")
    if size_error:
        st.error(f"Cannot train: {plain(size_error)}.", icon=":material/error:")
    buttons = st.container(horizontal=True)
    start = buttons.button("Train transcoders" if kind == "transcoder" else "Train dictionaries", type="primary", icon=":material/play_arrow:", key="dict_start",
                           disabled=running or bool(size_error))
    cancel = buttons.button("Cancel", icon=":material/stop:", disabled=not running, key="dict_cancel")
    if start:
        session = ss.setdefault("_train_session", uuid.uuid4().hex)  # shared with Train your own: one job a session
        folder = None
        try:
            folder = new_set_folder("dict")
            new = REGISTRY.start(session, text or "", settings, label, make=DictionaryJob, model=model,
                                 tokenizer=state.tokenizer, folder=folder)
        except ServerBusy as exc:
            st.warning(f"Not started: {plain(str(exc))}.", icon=":material/hourglass_top:")
        except (TrainingRefused, DictionaryError) as exc:
            st.error(f"Cannot start: {plain(error_line(exc))}.", icon=":material/error:")
        else:
            ss[JOB], ss[ADOPTED] = (new, path), None
            ss.pop(MESSAGE, None)
            st.rerun()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    if cancel and job is not None:
        job.cancel()
        job.wait(10)
        st.rerun()


@st.fragment(run_every=POLL_SECONDS)
def _live(job: DictionaryJob, model_path: str) -> None:
    """The job's progress bar, redrawn every POLL_SECONDS while it runs; when it ends its set is registered and
    the whole page runs again (so that the page's own set list, drawn above, has it)."""
    p = job.progress()
    if not p.running:
        _adopt(job, model_path)
        st.rerun(scope="app")
    words = STATUS_WORDS.get(p.status, p.status)
    st.progress(min(1.0, p.fraction), text=plain(f"{words}: {p.message} · {p.elapsed:.0f} s"))


def _upload_part(state) -> None:
    upload = st.file_uploader("A .zip of dictionary folders (SAELens layout: cfg.json + sae_weights.safetensors "
                              "in each)", type=["zip"], key="dict_zip", max_upload_size=MAX_UPLOAD_MB)
    st.caption("Each dictionary must read a hook of the loaded model with its width (e.g. a Gemma Scope or SAELens "
               "dictionary for this checkpoint, or a set trained here and downloaded). Checked before use as any "
               "upload: sizes, paths, file kinds, shapes, NaN.")
    if upload is None:
        return
    key = (state.model_path, upload.file_id)
    if ss.get(UPLOADED, {}).get(key):
        kind, message = ss[UPLOADED][key]
        getattr(st, kind)(message)
        return
    folder = None
    try:
        folder = new_set_folder("upl")
        with st.spinner("Checking the dictionaries…"):
            folders = unpack_dictionaries(upload.getvalue(), folder, state.model, upload.name[:80])
    except DictionaryError as exc:
        result = ("error", f"Not used: {plain(error_line(exc, 300))}.")
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        label = f"uploaded: {upload.name[:60]} ({len(folders)} dictionar{'ies' if len(folders) != 1 else 'y'})"
        add_session_set(state.model_path, label, [str(f) for f in folders])
        result = ("success", f"**{plain(label)}** is in the dictionary list.")
    ss.setdefault(UPLOADED, {})[key] = result
    getattr(st, result[0])(result[1])


def adopt_finished() -> None:
    """Register this session's dictionary training that has ended (once): call it before a page reads
    :func:`viz_ui.app.features.dictionary_sets`, so that a set finished since the last run is listed at once."""
    stored = ss.get(JOB)
    if stored is not None and not stored[0].running:
        _adopt(*stored)


def manage_dictionaries(state) -> None:
    """Draw "Dictionaries for this model": train dictionaries on the loaded model in the background (progress bar,
    Cancel), download this session's trained sets as ``.zip``, upload a ``.zip`` of SAELens folders. ``state``: the
    page's :class:`viz_ui.app.layout.AppState`."""
    stored = ss.get(JOB)
    job, job_path = stored if stored is not None else (None, None)
    if job is not None and not job.running:
        _adopt(job, job_path)
    running = job is not None and job.running
    with st.expander("Dictionaries for this model: train or upload", icon=":material/construction:",
                     expanded=running or MESSAGE in ss and ss.get(ADOPTED) == getattr(job, "id", None)):
        train, upload = st.tabs(["Train dictionaries for this model", "Upload dictionaries (.zip)"])
        with train:
            if running and job_path != state.model_path:
                st.info("A dictionary training for another model is running in this session.",
                        icon=":material/hourglass_top:")
            _train_part(state, job)
            if running:
                _live(job, job_path)
            kind, message = ss.get(MESSAGE, (None, None))
            if kind and not running:
                getattr(st, kind)(message)
            if job is not None and not running and job_path == state.model_path and job.progress().written \
                    and not state.display.lecture:
                st.download_button("The trained set (.zip)", data=job.zip_bytes, file_name="dictionaries.zip",
                                   mime="application/zip", icon=":material/download:", key="dict_download",
                                   help="One folder per dictionary in SAELens's layout (cfg.json, "
                                        "sae_weights.safetensors, the top-context index) and the corpus the index "
                                        "points into: upload it again here, or load it with "
                                        "viz_model.features.load_dictionary.")
        with upload:
            _upload_part(state)
        sets = dictionary_sets(state.model_path)
        if sets:
            st.caption("Dictionary sets for this model: " + plain("; ".join(
                f"{name} ({len(folders)})" for name, folders in sets.items()), limit=600))
