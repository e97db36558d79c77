"""Cause and effect: switch heads off (ablation), swap activations between a clean and a corrupted text (activation
patching), and split a logit into what each component writes (direct logit attribution)."""

from typing import NamedTuple

import numpy as np
import pandas as pd
import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.views import code_interventions as code
from viz_ui.analysis.generation import continuation_text, mask_positions
from viz_ui.app.gate import about
from viz_ui.app.interventions import (ablation_gated, ablation_view_gated, attribution_gated, corruption_gated,
                                       default_method,
                                       effect_map_key, first_corruption, follow_corruption, get_corrupted,
                                       get_corrupted_logits, get_patching_values, get_prompt, head_effects_gated,
                                       patch_lens_gated, patching_cached, patching_estimates, patching_gated,
                                       renew_effect_map_key)
from viz_ui.analysis.interventions import (METHODS, AblationView, Head, attribution_available, biggest_changes,
                                           generation_table, heads_text, lens_table, normalised, prob_diff_table,
                                           prompt_of, softmax, token_pairs, top_ids)
from viz_ui.views.interventions import (component_bars, delta_bars, head_map, heatmap_frame, patch_map, prob_diff_bars,
                                       top_bars)
from viz_ui.app.patching_agreement import show_agreement
from viz_ui.app.layout import (MAX_CHARS, pick_ablated_heads, pick_index, selected_points, set_ablated_heads, set_shared, shared_widget,
                           shared_widget_key, show_code, show_figure, show_link, show_table, side_by_side)
from viz_ui.app.page import PageContext, open_page
from viz_ui.analysis.encoder_decoder import output_text
from viz_ui.app.state import export_load_args, get_trace
from viz_ui.analysis.text import plain, plotly_text
from viz_ui.analysis.text_trace import Trace
from viz_model.tokenizer import IdTokenizer

TITLES = {"resid_pre": "Patching the residual stream entering each layer (resid_pre)",
          "attn_out": "Patching each layer's attention output (attn_out)",
          "mlp_out": "Patching each layer's MLP output (mlp_out)", "head": "Patching each head (hook_z)"}
PATCH_MAX_TOKENS = 64  # patching runs one copy of the text per cell: layers × positions × 3 + heads copies
PARTS = {"ablation": "Ablation: switch heads off", "patching": "Activation patching: clean vs corrupted",
         "attribution": "Direct logit attribution"}


class Prediction(NamedTuple):
    """The output position every part measures: ``pos`` (a decoder's next token after it, a masked LM's token at
    it), ``where`` in words, and ``unit``, what is predicted ("next token" or "token here")."""

    pos: int
    where: str
    unit: str


def model_note(ctx: PageContext) -> None:
    """What the runs are on an encoder-decoder or a masked-LM encoder (nothing on a decoder)."""
    if ctx.trace.is_encoder_decoder:
        st.caption(":material/swap_horiz: Encoder-decoder: every run below is the **decoder's**, over its own output for "
                   "the source text (the start token, then the greedy output), with the source read by the encoder. "
                   "Ablation switches off decoder self-attention heads; patching swaps decoder activations between the "
                   "source and a corrupted source; attribution needs a pre-LN model.")
    elif not ctx.cfg.causal:
        st.caption(":material/info: Encoder (masked LM): the output is the token the model fills in *at* a position "
                   "(write [MASK] in the text), not a next token, so there is no generation here. Ablation and patching "
                   "work as on a decoder, except that a patch can reach every position in both directions; attribution "
                   "needs a pre-LN model without an embedding LayerNorm.")


def pick_prediction(ctx: PageContext) -> Prediction:
    """The shared ``query`` selector: the position whose prediction the parts measure."""
    trace, n = ctx.trace, ctx.trace.n_tokens
    label = lambda i: f"{i} {trace.labels[i]}"  # noqa: E731
    if not ctx.cfg.causal:
        masks = mask_positions(ctx.tokenizer, trace.ids)
        pos = pick_index(st, "Prediction at position", "query", n, masks[0] if masks else n - 1, label)
        return Prediction(pos, f"at position {pos} (“{trace.labels[pos]}”)", "token here")
    if trace.is_encoder_decoder:
        pos = pick_index(st, "Decoder position (its prediction is the next output token)", "query", n, 0, label)
        return Prediction(pos, f"after decoder position {pos} (“{trace.labels[pos]}”)", "next token")
    pos = pick_index(st, "Prediction after position", "query", n, n - 1, label)
    return Prediction(pos, f"after “{trace.labels[pos]}” (position {pos})", "next token")


def has_tokenizer(ctx: PageContext) -> bool:
    return not isinstance(ctx.tokenizer, IdTokenizer)


def pick_token(ctx: PageContext, options: list[int], default: int, label: str, help: str | None = None) -> int:
    """An output token chosen among ``options`` (ids), shared by the parts and kept in the link as ``token``."""
    vocab = ctx.vocab
    return shared_widget(st.selectbox, label, options, key="token", default=default, valid=options.__contains__,
                         cast=int, format_func=lambda i: f"{vocab[i]}  (id {i})", help=help)


# ---- Ablation -------------------------------------------------------------------------------------------------

def toggle_head(select_key: str, heads: tuple[Head, ...], n_heads: int) -> None:
    """on_select of the effect map: the clicked head is switched off, or back on; a fresh chart key forgets the click."""
    points = selected_points(select_key)
    if points and points[0].get("curve_number") == 1:
        set_ablated_heads(set(heads) ^ {divmod(points[0]["point_index"], n_heads)})
        renew_effect_map_key()


def effect_map(ctx: PageContext, at: Prediction, heads: tuple[Head, ...], kind: str, mean_text: str,
               logits: tuple[np.ndarray, np.ndarray] | None) -> int:
    """The per-head effect map (one batched ablation per head, on top of ``heads``) and its token selector; returns
    the token, whose log-probability change the map shows. ``logits``: intact and ablated (None: no ablated run)."""
    cfg, vocab = ctx.cfg, ctx.vocab
    intact_logits = ctx.trace.arrays["hook_logits"][at.pos]
    ablated = top_ids(logits[1], 5) if logits is not None else []
    options = top_ids(intact_logits) + [i for i in ablated if i not in top_ids(intact_logits)]
    token = pick_token(ctx, options, options[0], f"Effect map: the change in log p of this {at.unit}",
                       help="The map shows, for every head, how the log-probability of this token changes when that "
                            "head is switched off too (on top of the heads already off).")
    effects = head_effects_gated(ctx.path, ctx.trace.text, heads, kind, mean_text, at.pos, token)
    if effects is None:  # a slow model: the map waits for its button
        return token
    select_key = effect_map_key()
    fig = head_map(effects, f"Each head switched off: Δ log p({plotly_text(vocab[token])})",
                   "Δ log p (nats)", marked=heads, click_hint="click: switch this head off / on",
                   cell_text=cfg.n_heads <= 16 and ctx.display.scale <= 1.5)
    show_figure(fig, ctx.app, f"ablation_effects_{heads_text(heads) or 'none'}", select_key=select_key,
                on_select=lambda: toggle_head(select_key, heads, cfg.n_heads),
                data=lambda: heatmap_frame(effects, [f"L{i}" for i in range(cfg.n_layers)],
                                           [f"H{i}" for i in range(cfg.n_heads)]))
    st.caption(f"The change in the log-probability of {plain(vocab[token])} {plain(at.where)} when each head is switched "
               "off "
               + (f"on top of the {len(heads)} already off (✕, which show 0)" if heads else "alone")
               + ". Blue: switching the head off lowers it (the head helped predict it); red: raises it. All heads run "
               "batched. Click a head to switch it off, or back on.")
    return token


def ablated_output(ctx: PageContext, at: Prediction, heads: tuple[Head, ...], logits: tuple[np.ndarray, np.ndarray]) -> None:
    """The output intact vs ablated (``logits``: the two runs' ``[d_vocab]`` logits at the position)."""
    vocab, key = ctx.vocab, heads_text(heads)
    intact, ablated = logits
    st.subheader(f"The output {plain(at.where)}: intact vs ablated")
    left, right = side_by_side(ctx.app, [3, 2])
    with left:
        table = prob_diff_table(intact, ablated, vocab)
        show_figure(prob_diff_bars(table, f"Intact vs {key.replace(',', ', ')} off"), ctx.app,
                    f"ablation_output_{key}", data=lambda: table, live="ablation_output")
    with right:
        changes = biggest_changes(intact, ablated, vocab)
        if len(changes):
            show_figure(delta_bars(changes, "Largest rises and falls"), ctx.app, f"ablation_delta_{key}",
                        data=lambda: changes, live="ablation_delta")
            st.caption("Over the whole vocabulary; changes under 0.1 percentage point are left out.")
        else:
            st.info("No token's probability changed by 0.1 percentage point or more.")
    p0, p1 = softmax(intact), softmax(ablated)
    top0, top1 = int(p0.argmax()), int(p1.argmax())
    st.markdown(f"Top {at.unit}: **{plain(vocab[top0])}** ({p0[top0]:.1%}) intact → **{plain(vocab[top1])}** "
                f"({p1[top1]:.1%}) ablated." + (" The top prediction changed." if top0 != top1 else ""))


def ablation_details(ctx: PageContext, at: Prediction, heads: tuple[Head, ...], kind: str, mean_text: str,
                     logits: tuple[np.ndarray, np.ndarray]) -> None:
    """The logit lens and the greedy generation with and without ``heads``: computed after the output charts
    (:func:`ablated_output`) are on the page, which do not wait for them."""
    cfg, vocab, trace = ctx.cfg, ctx.vocab, ctx.trace
    view = ablation_view_gated(ctx.path, trace.text, heads, kind, mean_text, at.pos, logits)
    if view is None:  # a slow model: they wait for their button
        return
    lens_col, gen_col = side_by_side(ctx.app, 2)
    with lens_col:
        st.markdown(f"**Logit lens {plain(at.where)}**: the top {at.unit} after each layer (the residual stream decoded with the "
                    "model's own output head: its final norm, if any, and the unembedding)")
        show_table(lens_table(view, vocab), ctx.app, hide_index=True)
    with gen_col:
        if cfg.causal:
            try:
                if trace.is_encoder_decoder:
                    end = cfg.decoder_end_id
                    shown = [output_text(ctx.tokenizer, view.gen_intact, end),
                             output_text(ctx.tokenizer, view.gen_ablated, end)]
                    st.markdown("**The output, greedy**, intact and with the heads off")
                else:
                    ids = trace.ids.tolist()
                    shown = [continuation_text(ctx.tokenizer, ids, view.gen_intact),
                             continuation_text(ctx.tokenizer, ids, view.gen_ablated)]
                    st.markdown(f"**{len(view.gen_intact)} greedy tokens after the text**, intact and with the heads "
                                "off (the ablation applies at every step)")
                st.code(f"intact : {shown[0]!r}\nablated: {shown[1]!r}", language=None, wrap_lines=True)
            except ValueError as exc:  # an uploaded tokenizer that fails on these ids
                st.error(plain(str(exc)))
            show_table(generation_table(view, vocab), ctx.app, hide_index=True)
        else:
            st.caption("An encoder fills in positions all at once: there is no generation.")


def ablation_part(ctx: PageContext, at: Prediction) -> None:
    """Heads switched off (zero or mean ablation): the output, logit lens and generation without them, and the
    per-head effect map whose clicks switch heads off and on."""
    path, text, trace, cfg = ctx.path, ctx.trace.text, ctx.trace, ctx.cfg
    st.markdown("Switch heads off and watch what the model does without them. **Zero** ablation sets a head's output "
                "(its `hook_z`, the input to W_O) to 0; **mean** ablation replaces it by its mean over the positions "
                "of a text, keeping the average signal and removing what is specific to each token.")
    c1, c2 = st.columns([3, 2])
    heads = pick_ablated_heads(c1, cfg.n_layers, cfg.n_heads, placeholder="Choose heads, or click them in the map below")
    kind = shared_widget(c2.radio, "Ablation", ["zero", "mean"], key="ablation", default="zero",
                         valid=("zero", "mean").__contains__, horizontal=True)
    mean_text = ""
    if kind == "mean":
        mean_text = shared_widget(st.text_input, "Mean over the positions of (empty: this text)", key="mean_text",
                                  default="", cast=lambda v: str(v)[:MAX_CHARS], max_chars=MAX_CHARS,
                                  placeholder="this text")
    try:
        if kind == "mean" and mean_text:
            get_trace(path, mean_text)  # a reference text that cannot be run is said at once, before any button
        logits = ablation_gated(path, text, heads, kind, mean_text, at.pos) if heads else None  # None: waits for its button
    except ValueError as exc:  # the reference text cannot be run
        st.error(f"The reference text cannot be run: {plain(str(exc))}.")
        return
    map_slot = st.container()  # the effect map stands here but is computed last: the output below appears first
    if not heads:
        with map_slot:
            token = effect_map(ctx, at, heads, kind, mean_text, logits)
        st.info("No head is switched off yet: choose heads above or click them in the map. The output, the logit "
                "lens and the generation below then show the model without them.", icon=":material/touch_app:")
        show_code(ctx.app, "ablation", code.ablation_code(path, text, get_prompt(path, text), has_tokenizer(ctx),
                                                          trace.truncated, list(heads), kind, "", None, False, at.pos,
                                                          token, cfg.causal, export_load_args(ctx.model)))
        return
    if logits is None:  # a slow model: the ablated run waits for its button (shown above)
        with map_slot:
            effect_map(ctx, at, heads, kind, mean_text, logits)
        return
    ablated_output(ctx, at, heads, logits)
    ablation_details(ctx, at, heads, kind, mean_text, logits)
    with map_slot:
        token = effect_map(ctx, at, heads, kind, mean_text, logits)
    reference = get_trace(path, mean_text) if kind == "mean" and mean_text else None
    show_code(ctx.app, "ablation", code.ablation_code(path, text, get_prompt(path, text), has_tokenizer(ctx),
                                                      trace.truncated, list(heads), kind, mean_text,
                                                      reference and prompt_of(reference),
                                                      bool(reference and reference.truncated), at.pos, token,
                                                      cfg.causal, export_load_args(ctx.model)))


# ---- Activation patching --------------------------------------------------------------------------------------

def parse_cell(value: str, n_layers: int, n_pos: int, n_heads: int) -> tuple[str, int, int] | None:
    try:
        site, layer, index = str(value).split(":")
        layer, index = int(layer), int(index)
    except ValueError:
        return None
    ok = site in TITLES and 0 <= layer < n_layers and 0 <= index < (n_heads if site == "head" else n_pos)
    return (site, layer, index) if ok else None


def pick_corrupted(ctx: PageContext, at: Prediction) -> tuple[str, Trace] | None:
    """The shared corrupted text (prefilled with the edit that changes the output most) and its trace, after the
    checks patching needs (one line each when they fail: then None)."""
    path, text, trace, cfg, n = ctx.path, ctx.trace.text, ctx.trace, ctx.cfg, ctx.trace.n_tokens
    seq2seq = trace.is_encoder_decoder
    found = corruption_gated(path, text)  # the search runs the model on every candidate: a button when slow
    default = found if found is not None else first_corruption(path, text)
    follow_corruption(text, default)  # the corrupted text follows the clean text and the search until edited
    corrupted_text = shared_widget(st.text_area, "Corrupted " + ("source " if seq2seq else "") + "text", key="corrupt",
                                   default=default, cast=lambda v: str(v)[:MAX_CHARS], max_chars=MAX_CHARS, height=90,
                                   help="Prefilled with the one-word edit (a name, he/she, a number, …) that changes "
                                        "the model's output most. Press Ctrl+Enter to apply an edit.")
    if not corrupted_text.strip():
        st.info("The corrupted text is empty: type a version of the clean text with one word changed.")
        return None
    try:
        corrupted_trace = get_trace(path, corrupted_text)
    except ValueError as exc:
        st.error(f"The corrupted text cannot be run: {plain(str(exc))}.")
        return None
    clean_labels = trace.src_labels if seq2seq else trace.labels
    bad_labels = corrupted_trace.src_labels if seq2seq else corrupted_trace.labels
    pairs = token_pairs(clean_labels, bad_labels)
    differ = pairs[pairs["differs"] != ""]
    if not seq2seq and len(clean_labels) != len(bad_labels):
        st.error(f"The clean text has {len(clean_labels)} tokens and the corrupted one {len(bad_labels)}: activation "
                 "patching swaps activations position by position, so both must have the same number of tokens. "
                 "Change words for words of the same token length (the table marks where they part).",
                 icon=":material/straighten:")
        show_table(pairs, ctx.app, hide_index=True, height=320)
        return None
    if differ.empty:
        st.info("The corrupted text has the same tokens as the clean text: change a word (a name, he/she, a number) "
                "to see which layers and positions carry the difference.", icon=":material/edit:")
        return None
    where_differ = ", ".join(f"{r.position} ({r.clean} → {r.corrupted})" for r in differ.head(6).itertuples())
    st.caption(f"{'Source tokens differ' if seq2seq else 'They differ'} at position{'s' * (len(differ) > 1)} "
               f"{plain(where_differ)}{' …' if len(differ) > 6 else ''}."
               + (f" Source lengths may differ: the patched activations are the decoder's, which reads the same "
                  "output in both runs." if seq2seq else ""))
    with st.expander("The two texts token by token"):
        show_table(pairs, ctx.app, hide_index=True, height=320)
    if n > PATCH_MAX_TOKENS:
        st.info(f"Patching runs one copy of the text per cell ({cfg.n_layers} layers × {n} positions × 3, plus every "
                f"head): this page patches texts of up to {PATCH_MAX_TOKENS} tokens. Shorten the text to patch it.",
                icon=":material/timer:")
        return None
    return corrupted_text, corrupted_trace


class Metric(NamedTuple):
    """What patching measures: ``kind`` ("logit_diff" or "prob"), the ``answer`` token and the token it is
    measured ``wrong`` against (ids; ``wrong == answer`` for "prob"), and the metric's ``name`` in words."""

    kind: str
    answer: int
    wrong: int
    name: str


def pick_metric(ctx: PageContext, at: Prediction, corrupted_text: str) -> Metric:
    """The shared metric, answer and "against" selectors, defaulting to the clean and the corrupted run's tops."""
    vocab = ctx.vocab
    intact_logits = ctx.trace.arrays["hook_logits"][at.pos]
    corrupted_logits = get_corrupted_logits(ctx.path, ctx.trace.text, corrupted_text, at.pos)
    c1, c2, c3 = st.columns([2, 2, 2])
    metric = shared_widget(c1.radio, "Metric", ["logit_diff", "prob"], key="metric", default="logit_diff",
                           valid=("logit_diff", "prob").__contains__,
                           format_func={"logit_diff": "logit difference", "prob": "probability of the answer"}.get)
    clean_top, bad_top = top_ids(intact_logits), top_ids(corrupted_logits)
    options = clean_top + [i for i in bad_top if i not in clean_top]
    fmt = lambda i: f"{vocab[i]}  (id {i})"  # noqa: E731
    answer = shared_widget(c2.selectbox, "Answer (the clean run's)", options, key="answer", default=clean_top[0],
                           valid=options.__contains__, cast=int, format_func=fmt)
    rise = softmax(corrupted_logits) - softmax(intact_logits)
    rise[answer] = -1.0
    default_wrong = bad_top[0] if bad_top[0] != answer else int(rise.argmax())
    wrong_options = [i for i in options if i != answer] + ([default_wrong] if default_wrong not in options else [])
    wrong = answer
    if metric == "logit_diff":
        wrong = shared_widget(c3.selectbox, "Against (the corrupted run's)", wrong_options, key="wrong",
                              default=default_wrong, valid=wrong_options.__contains__, cast=int, format_func=fmt,
                              help="Default: the corrupted run's top token, or when both runs agree on the top token, "
                                   "the token whose probability the corruption raised most.")
    name = (f"logit({vocab[answer]}) − logit({vocab[wrong]})" if metric == "logit_diff" else f"p({vocab[answer]})")
    return Metric(metric, answer, wrong, name)


def pick_cell(ctx: PageContext) -> tuple[str, int, int] | None:
    """The patching cell whose patch lens is shown (``site, layer, index``), shared and kept in the link as
    ``cell=site:layer:index``; None when no cell is chosen."""
    cfg, n = ctx.cfg, ctx.trace.n_tokens
    valid_cell = lambda v: v == "" or parse_cell(v, cfg.n_layers, n, cfg.n_heads) is not None  # noqa: E731
    return parse_cell(st.session_state[shared_widget_key("cell", "", valid_cell)], cfg.n_layers, n, cfg.n_heads)


def choose_cell(site: str, width: int) -> None:
    """on_select of a patching map: the clicked cell opens the patch lens."""
    points = selected_points(f"patch_{site}")
    if points and points[0].get("curve_number") == 1:
        layer, index = divmod(points[0]["point_index"], width)
        set_shared("cell", f"{site}:{layer}:{index}")


def link_cell(cell: tuple[str, int, int] | None) -> None:
    """Keep the chosen cell in the link (``cell``), or none there."""
    if cell is not None and st.query_params.get("cell") != ":".join(map(str, cell)):
        st.query_params["cell"] = ":".join(map(str, cell))
    elif cell is None and "cell" in st.query_params:
        del st.query_params["cell"]


def pick_method(ctx: PageContext) -> tuple[str, dict[str, float]]:
    """The shared patching method (``patch_method``: exact, or attribution patching where available) and the
    estimated seconds of every method."""
    estimates = patching_estimates(ctx.path, ctx.trace.text)
    methods = list(METHODS) if attribution_available() else ["exact"]
    words = {"exact": f"exact: one run per cell ({about(estimates['exact'])})",
             "attribution": f"attribution patching: a gradient estimate ({about(estimates['attribution'])})"}
    method = shared_widget(st.radio, "Method", methods, key="patch_method",
                           default=default_method(ctx.model, estimates, methods), valid=methods.__contains__,
                           horizontal=True, format_func=words.get,
                           help="Exact: each cell is a run of the corrupted text with that activation taken from the "
                                "clean run. Attribution patching (Nanda, 2023) estimates every cell at once from one "
                                "backward pass: the metric's gradient times the activation's change (clean − "
                                "corrupted), a first-order guess that can miss where the change is large. The default "
                                "is attribution for large models (docs/interventions.md).")
    return method, estimates


def patch_lens_panel(ctx: PageContext, corrupted_text: str, cell: tuple[str, int, int] | None) -> None:
    """What the chosen ``cell`` changed downstream (a patch lens), or how to choose one."""
    if cell is None:
        st.info("Click a cell of a map to see what it changed downstream: which later heads' and MLPs' outputs "
                "moved most (a patch lens).", icon=":material/touch_app:")
        return
    site, layer, index = cell
    what = f"head L{layer}H{index}" if site == "head" else f"{site}, L{layer}, position {index}"
    moved = patch_lens_gated(ctx.path, ctx.trace.text, corrupted_text, site, layer, index)
    if moved is None:
        return
    show_figure(top_bars(moved, f"Patch lens: {what}", "‖Δ output‖ (patched − corrupted run)", k=12),
                ctx.app, "patch_lens", data=lambda: pd.DataFrame({"component": list(moved),
                                                                  "norm of change": list(moved.values())}))
    taken = (f"head L{layer}H{index}'s output (at every position)" if site == "head" else
             f"{site} of layer {layer} at position {index} (“{ctx.trace.labels[index]}”)")
    st.caption(f"Taking {plain(taken)} from the clean run moved what each of these later heads and MLPs "
               "writes into the residual stream by this much (Frobenius norm over positions, patched − "
               "corrupted run). Components before it do not move.")


def patching_maps(ctx: PageContext, at: Prediction, corrupted_text: str, metric: Metric,
                  ends: tuple[float, float], cell: tuple[str, int, int] | None) -> None:
    """The four patching maps (resid_pre, attn_out, mlp_out by layer × position; heads by layer × head), normalised
    by the clean and corrupted run's values of the metric (``ends``), the patch lens of ``cell`` and the two
    methods' agreement."""
    path, text, cfg, n, labels = ctx.path, ctx.trace.text, ctx.cfg, ctx.trace.n_tokens, ctx.trace.labels
    clean_value, corrupted_value = ends
    layers = [f"L{i}" for i in range(cfg.n_layers)]
    positions = [f"{i} {t}" for i, t in enumerate(labels)]
    method, estimates = pick_method(ctx)
    settings = (path, text, corrupted_text, metric.kind, metric.answer, metric.wrong, at.pos)
    raw = patching_gated(*settings, method, estimates[method])
    if raw is None:  # a slow model: the maps wait for their button
        return
    other = patching_cached(*settings, "attribution" if method == "exact" else "exact")
    maps = {site: normalised(values, clean_value, corrupted_value) for site, values in raw.items()}
    for site in ("resid_pre", "attn_out", "mlp_out"):
        values, title = maps[site], TITLES[site] if method == "exact" else "Attribution estimate: " + TITLES[site][9:]
        selected = (cell[1], cell[2]) if cell and cell[0] == site else None
        show_figure(patch_map(values, labels, title, selected), ctx.app, f"patching_{site}",
                    select_key=f"patch_{site}", on_select=lambda site=site: choose_cell(site, n),
                    data=lambda v=values: heatmap_frame(v, layers, positions))
    head_col, lens_col = side_by_side(ctx.app, 2)
    with head_col:
        values = maps["head"]
        selected = (cell[1], cell[2]) if cell and cell[0] == "head" else None
        show_figure(head_map(values, TITLES["head"], "restored", marked=[selected] if selected else [],
                             click_hint="click: what changed downstream", zmax=max(1.0, float(abs(values).max())),
                             cell_text=False, marker="square-open"),
                    ctx.app, "patching_head", select_key="patch_head",
                    on_select=lambda: choose_cell("head", cfg.n_heads),
                    data=lambda: heatmap_frame(values, layers, [f"H{i}" for i in range(cfg.n_heads)]))
    link_cell(cell)
    with lens_col:
        patch_lens_panel(ctx, corrupted_text, cell)
    show_agreement(ctx.app, maps, other, clean_value, corrupted_value, method)


def patching_part(ctx: PageContext, at: Prediction) -> None:
    """Activation patching from the clean text (the sidebar's) into a corrupted one: how much of the clean answer
    each activation restores."""
    path, text, trace = ctx.path, ctx.trace.text, ctx.trace
    st.markdown("Run a **corrupted** text, but take one activation from the run of the **clean** text (the one in "
                "the sidebar): how much of the clean answer comes back? Each cell is one such run. "
                "Values are normalised: **1** = the clean metric fully restored, **0** = no effect "
                "((patched − corrupted) / (clean − corrupted)).")
    corrupted = pick_corrupted(ctx, at)
    if corrupted is None:
        return
    corrupted_text, corrupted_trace = corrupted
    metric = pick_metric(ctx, at, corrupted_text)
    values = get_patching_values(path, text, corrupted_text, metric.kind, metric.answer, metric.wrong, at.pos)
    m1, m2 = st.columns(2)
    m1.metric(f"Clean run: {plain(metric.name)} {plain(at.where)}", f"{values[0]:.4f}")
    m2.metric("Corrupted run", f"{values[1]:.4f}")
    if normalised(np.zeros(1), *values) is None:
        st.info("Both runs give the same metric, so there is nothing to restore: choose other tokens, or another "
                "edit.", icon=":material/block:")
        return
    cell = pick_cell(ctx)
    patching_maps(ctx, at, corrupted_text, metric, values, cell)
    show_code(ctx.app, "patching", code.patching_code(path, text, corrupted_text, get_prompt(path, text),
                                                      get_corrupted(path, text, corrupted_text), has_tokenizer(ctx),
                                                      trace.truncated, corrupted_trace.truncated, metric.kind,
                                                      metric.answer, metric.wrong, at.pos, cell,
                                                      export_load_args(ctx.model)))


# ---- Direct logit attribution ---------------------------------------------------------------------------------

def attribution_part(ctx: PageContext, at: Prediction) -> None:
    """Direct logit attribution: the chosen token's logit split into one term per component."""
    path, text, vocab = ctx.path, ctx.trace.text, ctx.vocab
    st.markdown("In a pre-LN model the last residual stream is a **sum**: the embeddings plus what every head and "
                "MLP wrote. With the final norm's scale frozen at its value in this run (TransformerLens' "
                "`apply_ln_to_stack`), the logit of a token splits exactly into one term per component: what that "
                "component wrote, read along the token's unembedding direction.")
    options = top_ids(ctx.trace.arrays["hook_logits"][at.pos])
    token = pick_token(ctx, options, options[0], f"The {at.unit} whose logit is split")
    try:
        found = attribution_gated(path, text, token, at.pos)
    except ValueError as exc:
        st.info(f"Direct logit attribution is not available for this model: {plain(str(exc))}.",
                icon=":material/block:")
        return
    if found is None:  # a slow model: waits for its button
        return
    parts, logit = found
    total = sum(parts.values())
    m1, m2, m3 = st.columns(3)
    m1.metric("Sum of the contributions", f"{total:.4f}")
    m2.metric(f"The model's logit of {plain(vocab[token])}", f"{logit:.4f}")
    m3.metric("Difference", f"{total - logit:.1e}")
    title = plotly_text(f"Direct contribution of every component to the logit of {vocab[token]} {at.where}")
    show_figure(component_bars(parts, title,
                               "logit units"), ctx.app, f"attribution_{token}",
                data=lambda: pd.DataFrame({"component": list(parts), "logit": list(parts.values())}))
    st.caption("Bars in the order of the forward pass: the embeddings, then per layer each head (L·H·), the "
               "attention output bias b_O and the MLP; the last bar, “bias”, is the constant rest (the final norm's "
               "bias and b_U). Blue raises the logit, red lowers it. Hover a bar for its name. A direct contribution "
               "leaves out what a component does through later layers.")
    show_figure(top_bars(parts, "The largest contributions", "logit units"), ctx.app, f"attribution_top_{token}")
    show_code(ctx.app, "attribution", code.attribution_code(path, text, get_prompt(path, text), has_tokenizer(ctx),
                                                            ctx.trace.truncated, token, at.pos,
                                                            export_load_args(ctx.model)))


def run_part(ctx: PageContext, part: str, at: Prediction) -> None:
    """The chosen part; a run the model refuses (e.g. prompts of different lengths) is one line, no traceback."""
    try:
        {"ablation": ablation_part, "patching": patching_part, "attribution": attribution_part}[part](ctx, at)
    except ValueError as exc:
        st.error(f"The intervention cannot be run: {plain(str(exc))}.")


ctx = open_page("Cause and effect",
                "Intervene on the running model: switch heads off, swap activations between two texts, split a "
                "logit into what each part wrote. Each result comes from runs of the model with hooks, not from "
                "reading the attention maps.",
                needs_lm_head="This checkpoint has no language-model head: it ends in hidden states, so there is no "
                              "output whose change could be measured. The other pages work on it.")
model_note(ctx)
part = shared_widget(st.radio, "View", list(PARTS), key="part", default="ablation", valid=PARTS.__contains__,
                     horizontal=True, format_func=PARTS.get, label_visibility="collapsed")
run_part(ctx, part, pick_prediction(ctx))
show_link(ctx.app)
