"""Model inspector & upload: load your own checkpoint (this session only) and see its architecture,
parameter counts and weight statistics."""

from pathlib import PurePosixPath

import streamlit as st
from tokenizers import Tokenizer

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_model import CheckpointError, load_upload
from viz_model.loading.sources import MAX_UPLOAD_MB, MODEL_SUFFIXES
from viz_model.tokenizer import IdTokenizer
from viz_ui.analysis.cost import attention_cost, cost_lengths, quadratic_fit
from viz_ui.views.figures import cost_curve, layer_table_heatmap, value_bar
from viz_ui.analysis.inspector import architecture_table, parameter_table
from viz_ui.app.layout import set_shared, show_figure, show_link, show_table
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.gated import weight_stats_gated
from viz_ui.app.state import MAX_SESSION_MODELS, add_session_model, load_settings, session_models, upload_hash
from viz_ui.analysis.text import error_line, plain, recoverable

def load_upload_part(cap_mb: int) -> None:
    """The checkpoint uploader: a new file is loaded, added to the session's models and selected; the outcome is
    said after the rerun."""
    upload = st.file_uploader("Checkpoint file", type=[s.lstrip(".") for s in MODEL_SUFFIXES], key="upload_model",
                              max_upload_size=cap_mb)
    if upload is not None and st.session_state.get("_last_upload") != upload.file_id:
        st.session_state["_last_upload"] = upload.file_id  # each new file is read and hashed once
        data = upload.getvalue()
        digest = upload_hash(PurePosixPath(upload.name).suffix.lower().encode(), data)
        bar = st.progress(0.0, text=f"Loading {plain(upload.name)}…")
        try:  # any failure (a Rust panic too: a BaseException) is one line; Streamlit's rerun/stop signals pass
            dtype, device = load_settings()
            model, tokenizer = load_upload(upload.name, data, lambda f, msg: bar.progress(f, text=plain(msg)), cap_mb,
                                           dtype=dtype, device=device)
        except BaseException as exc:
            if not recoverable(exc):
                raise
            bar.empty()
            reason = str(exc) if isinstance(exc, CheckpointError) else f"{upload.name} cannot be loaded ({error_line(exc)})"
            st.session_state["_upload_message"] = ("error", f"{plain(error_line(reason, 300))}. The previous model is "
                                                   "still selected.")
        else:
            bar.progress(1.0, text="Done")
            names = {m.name for m in session_models().values()}
            name = f"{upload.name} (upload)"
            name = name if name not in names else f"{upload.name} (upload {digest[:6]})"
            add_session_model(digest, name, model, tokenizer, upload.name)
            set_shared("model", name)
            st.session_state["_upload_message"] = ("success", f"Loaded **{plain(upload.name)}**: "
                                                   f"{plain(model.cfg.family)}, {model.n_params():,} parameters. "
                                                   "It is now the selected model.")
            st.rerun()
    kind, message = st.session_state.pop("_upload_message", (None, None))
    if kind == "error":
        st.error(message, icon=":material/error:")
    elif kind == "success":
        st.success(message, icon=":material/check_circle:")


def tokenizer_upload(ctx: PageContext) -> None:
    """For a checkpoint without a tokenizer: upload its tokenizer.json, which makes a new session model."""
    if not isinstance(ctx.tokenizer, IdTokenizer):
        return
    st.markdown("This model has no tokenizer. Upload its **tokenizer.json** (Hugging Face tokenizers format) to "
                "type text instead of token ids.")
    tok_file = st.file_uploader("tokenizer.json", type=["json"], key="upload_tokenizer", max_upload_size=50)
    if tok_file is not None:
        raw = tok_file.getvalue()
        try:
            tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
            if tokenizer.get_vocab_size() > ctx.cfg.d_vocab:
                raise ValueError(f"it has {tokenizer.get_vocab_size()} tokens, the model only {ctx.cfg.d_vocab}")
        except BaseException as exc:  # tokenizers raises its own exception type for malformed JSON, or panics
            if not recoverable(exc):
                raise
            st.error(f"{plain(tok_file.name)} cannot be used: {plain(error_line(exc))}")
        else:
            tokenizer.no_padding()
            tokenizer.no_truncation()
            name = f"{ctx.app.model_name} + {tok_file.name}"
            add_session_model(upload_hash(ctx.path.encode(), raw), name, ctx.model, tokenizer, tok_file.name)
            set_shared("model", name)
            st.rerun()


def load_your_own(ctx: PageContext) -> None:
    """The box for loading a checkpoint (and, for one without, its tokenizer)."""
    cap_mb = min(MAX_UPLOAD_MB, int(st.get_option("server.maxUploadSize")))  # Streamlit's own cap applies too
    with st.container(border=True):
        st.markdown("**Load your own model**")
        st.caption(f"Accepted: {', '.join(MODEL_SUFFIXES)} up to {cap_mb} MB (the smaller of VIZ_MAX_UPLOAD_MB and "
                   "Streamlit's server.maxUploadSize). The model stays in this browser session only (the last "
                   f"{MAX_SESSION_MODELS} uploads are kept): other sessions never see it, and nothing is kept on the "
                   "server's disk. Pickle-based files are read with weights_only=True, so they cannot run code.")
        load_upload_part(cap_mb)
        tokenizer_upload(ctx)


def architecture(ctx: PageContext) -> None:
    """The model's configuration and its parameters per component."""
    model, cfg = ctx.model, ctx.cfg
    st.subheader(f"Architecture: {plain(ctx.app.model_name)}")
    left, right = st.columns([1, 1])
    with left:
        show_table(architecture_table(model), ctx.app, hide_index=True)
    with right:
        params = parameter_table(model)
        bars = value_bar(params["component"].tolist(), params["parameters"].to_numpy(), "Parameters per component",
                         "parameters").update_layout(title_subtitle_text=f"{model.n_params():,} in all")  # fits half a 1280 px window
        show_figure(bars, ctx.app, "parameters", data=lambda: params)
        st.caption("Tied matrices (W_U = W_Eᵀ) count once. Attention per layer: W_Q is d_model × n_heads·d_head, "
                   f"W_K and W_V d_model × n_kv_heads·d_head ({cfg.n_kv_heads} key/value heads), W_O n_heads·d_head × d_model.")


def weight_statistics(ctx: PageContext) -> None:
    """Statistics of every weight matrix, per layer."""
    st.subheader("Weight statistics per layer")
    stats = weight_stats_gated(ctx.path)  # a pass over every weight: behind a button when slow
    if stats is not None:
        stat = st.radio("Statistic", ["std", "rms", "max_abs", "mean"], horizontal=True, key="weight_stat",
                        format_func={"std": "standard deviation", "rms": "root mean square", "max_abs": "largest |w|",
                                     "mean": "mean"}.get)
        table = stats.pivot(index="layer", columns="matrix", values=stat)
        if stat == "mean":
            st.caption("Means are signed; the colours show their absolute value.")
        show_figure(layer_table_heatmap(table.abs().to_numpy(), table.columns.tolist(), f"{stat} of each weight matrix, per layer",
                                        stat), ctx.app, f"weight_{stat}", data=lambda: stats)
        with st.expander("All statistics as a table"):
            show_table(stats, ctx.app, height=420, hide_index=True)


def attention_cost_part(ctx: PageContext) -> None:
    """One attention layer of this model timed at several lengths, with the O(n² · d) fit."""
    model, cfg = ctx.model, ctx.cfg
    st.subheader("Why long contexts are expensive")
    st.markdown(f"Self-attention compares every token with every other: for n tokens each head computes an n × n "
                f"score matrix, so time grows like n² · d and the scores take n_heads · n² numbers. The button times one "
                f"layer of **this model** ({cfg.n_heads} heads, d_head {cfg.d_head}) on this machine, with random q, k, v, "
                "and draws the O(n² · d) curve fitted through the measurements.")
    lengths, budget_note = cost_lengths(cfg)  # n bounded by the attention memory budget (many heads: fewer points)
    if budget_note:
        st.caption(budget_note)
    if st.button("Measure on this machine", icon=":material/timer:"):
        with st.spinner("Timing attention…"):
            st.session_state["_cost"] = (ctx.path, attention_cost(model, lengths))
    measured = st.session_state.get("_cost")
    if measured and measured[0] == ctx.path and len(measured[1]) < 2:
        st.caption("Too few lengths fit the attention memory budget to draw a curve (VIZ_ATTN_BUDGET_MB).")
    elif measured and measured[0] == ctx.path:
        cost = measured[1]
        show_figure(cost_curve(cost["n"].to_numpy(), cost["time_ms"].to_numpy(), quadratic_fit(cost),
                               cost["scores_MB"].to_numpy(), "One attention layer: time and score memory vs n"), ctx.app,
                    "attention_cost", data=lambda: cost)
        doubling = cost["time_ms"].iloc[-1] / cost["time_ms"].iloc[-2]
        st.caption(f"From n = {int(cost['n'].iloc[-2])} to {int(cost['n'].iloc[-1])} tokens the time grew "
                   f"{doubling:.1f}× (the formula says 4× for twice the length; small n are dominated by fixed overheads).")


ctx = open_page("Model inspector & upload",
                "What the chosen model is made of, and a place to load your own checkpoint: a nanoGPT ckpt.pt, a "
                "Hugging Face folder as a .zip (GPT-2, BERT, RoBERTa, DistilBERT, Llama, Mistral, Qwen, Gemma, "
                "OLMo, Pythia, OPT, Phi-3, BART, ...), or this app's .safetensors.", needs_trace=False)
load_your_own(ctx)
architecture(ctx)
weight_statistics(ctx)
attention_cost_part(ctx)
show_link(ctx.app)
