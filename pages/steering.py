"""Steering & feature ablation: add a direction to the residual stream (a sparse dictionary's feature, or the
difference of two texts' mean activations) and watch the output and the greedy continuation change; switch a
dictionary's features off and see what the output loses."""

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_model import CheckpointError
from viz_ui.views import code_steering as code
from viz_ui.app.dictionary_jobs import adopt_finished, manage_dictionaries
from viz_ui.app.features import dictionary, dictionary_sets, get_text_features
from viz_ui.analysis.generation import continuation_text, mask_positions
from viz_ui.app.interventions import get_prompt
from viz_ui.analysis.interventions import biggest_changes
from viz_ui.views.interventions import delta_bars
from viz_ui.app.layout import (MAX_CHARS, pick_index, set_shared, setup_page, require_trace, shared_value, shared_widget,
                           show_code, show_figure, show_link, show_table, side_by_side)
from viz_ui.app.state import get_trace, get_vocab_labels
from viz_ui.app.steering import (N_NEW, Direction, ablate_gated, feature_direction, get_contrastive, steer_gated)
from viz_ui.views.steering import (compare_bars, compare_table, continuation_frame, kl_figure, strongest_features,
                                  top_change_words)
from viz_ui.analysis.text import error_line, plain
from viz_model.tokenizer import IdTokenizer

ALPHA_MAX = 10.0  # the slider's range, in the direction's unit
CONTRAST = ("Happy, happy, happy. She laughed and smiled.", "Sad, sad, sad. She cried and frowned.")

state = setup_page("Steering & feature ablation",
                   "Push the running model along a direction in its residual stream (a feature of a sparse dictionary, "
                   "or what separates two texts) and watch its output and its continuation change; or switch features "
                   "off and see what the output loses. Every number comes from runs of the model with hooks.")
trace = require_trace(state)
model, cfg, path, text = state.model, state.model.cfg, state.model_path, trace.text
lecture = state.display.lecture
if not model.has_lm_head or cfg.is_encoder_decoder:
    st.info("This page steers decoder-only and encoder (masked LM) models with a language-model head"
            + (": this checkpoint ends in hidden states." if not model.has_lm_head else
               "; this one is an encoder-decoder (its decoder's runs are on Cause and effect).")
            + " The other pages work on it.", icon=":material/block:")
    show_link(state)
    st.stop()
vocab = get_vocab_labels(path)
masked_lm = not cfg.causal
has_tokenizer = not isinstance(state.tokenizer, IdTokenizer)
ids = tuple(int(i) for i in trace.ids)
n = trace.n_tokens
adopt_finished()  # a dictionary training of this session that has ended joins the sets first
sets = dictionary_sets(path)
PARTS = {"steer": "Steering", "ablate": "Feature ablation"}
part = shared_widget(st.radio, "View", list(PARTS), key="spart", default="steer", valid=PARTS.__contains__,
                     horizontal=True, format_func=PARTS.get, label_visibility="collapsed")
if masked_lm:
    masks = mask_positions(state.tokenizer, trace.ids)
    pos = pick_index(st, "The token the model fills in at position", "query", n, masks[0] if masks else n - 1,
                     lambda i: f"{i} {trace.labels[i]}")
    unit_words = "token at this position"
    short_where = f"Token at position {pos}"
else:
    pos = n - 1
    unit_words = f"next token after “{trace.labels[pos]}”"
    short_where = "Next token"


def export(view: str, source: str) -> None:
    """The view's numbers as Python with the project's API (hidden in lecture mode, like every download)."""
    show_code(state, view, source, "checkpoint, text and dictionary")


def pick_dictionary() -> tuple[tuple[str, ...], int, list[str], object] | None:
    """The dictionary set (shared with the Features page's choice in this session) and the dictionary in it
    (``flayer`` in the link); None, with one line, when the set cannot be used."""
    label = st.selectbox("Dictionaries", list(sets), key="feature_set") if len(sets) > 1 else next(iter(sets))
    folders = sets[label]
    try:
        feats = get_text_features(path, ids, folders)
    except (CheckpointError, KeyError, ValueError, OSError) as exc:
        st.error(f"These dictionaries cannot be used with this model: {plain(error_line(exc))}.")
        return None
    row = pick_index(st, "Dictionary", "flayer", len(feats.hooks), len(feats.hooks) // 2, lambda i: feats.hooks[i])
    return folders, row, feats.hooks, feats.acts[row]


def output_bars(before, after, after_name: str, view: str, title: str) -> None:
    table = compare_table(before, after, vocab, after_name)
    show_figure(compare_bars(table, title, after_name), state, view, data=lambda: table)
    t0, p0, t1, p1 = top_change_words(before, after, vocab)
    st.markdown(f"Top {unit_words}: **{plain(t0)}** ({p0:.1%}) intact → **{plain(t1)}** ({p1:.1%}) {after_name}."
                + (" The top prediction changed." if t0 != t1 else ""))


# ---- Steering -------------------------------------------------------------------------------------------------

def steer_part() -> None:
    kinds = {"feature": "a dictionary feature's decoder direction", "contrastive": "text A minus text B"}
    if sets:
        kind = shared_widget(st.radio, "Steer with", list(kinds), key="steer", default="feature",
                             valid=kinds.__contains__, format_func=kinds.get, horizontal=True)
    else:
        kind = "contrastive"
        st.caption(f"Steering with text A minus text B: there is no sparse dictionary for {plain(state.model_name)} "
                   "yet (train or upload some below to steer with their features).")
    if kind == "feature":
        picked = pick_dictionary()
        if picked is None:
            return
        folders, row, hooks, acts = picked
        d = dictionary(folders[row])
        strongest = strongest_features(acts[-1:])
        default = strongest[0] if strongest else 0
        feature = shared_value("feature", default, valid=lambda v: 0 <= v < d.d_sae, cast=int)
        feature = st.number_input(f"Feature (0–{d.d_sae - 1}; default: the strongest at the last token)", 0,
                                  d.d_sae - 1, feature, key=f"steer_feature_{row}")
        if feature != st.session_state.get("_feature"):
            set_shared("feature", int(feature))
        direction = feature_direction(path, ids, folders, row, int(feature))
        key = ("feature", folders[row], int(feature))
        source = {"kind": "feature", "folder": folders[row], "feature": int(feature)}
        what = (f"feature {feature} of {hooks[row]}: its decoder row W_dec[{feature}] (norm "
                f"{float((direction.vector ** 2).sum() ** 0.5):.3g}) added at {direction.hook}")
    else:
        c1, c2 = st.columns(2)
        text_a = shared_widget(c1.text_input, "Text A (towards)", key="steer_a", default=CONTRAST[0],
                               cast=lambda v: str(v)[:MAX_CHARS], max_chars=MAX_CHARS)
        text_b = shared_widget(c2.text_input, "Text B (away from)", key="steer_b", default=CONTRAST[1],
                               cast=lambda v: str(v)[:MAX_CHARS], max_chars=MAX_CHARS)
        layer = pick_index(st, "Residual stream after layer", "slayer", cfg.n_layers, cfg.n_layers // 2,
                           lambda i: f"{i} (blocks.{i}.hook_resid_post)")
        hook = f"blocks.{layer}.hook_resid_post"
        if not text_a.strip() or not text_b.strip():
            st.info("Type two texts: the direction is the mean activation over A's positions minus B's.")
            return
        # two forward passes (the texts' traces and the direction): run only inside the gated steered run
        direction = Direction(hook, lambda: get_contrastive(path, text_a, text_b, hook), 1.0,
                              "the direction itself (1 adds mean(A) − mean(B))")
        key = ("contrastive", text_a, text_b, hook)

        def source() -> dict:  # for the exported script, once the run has read both texts
            ta, tb = get_trace(path, text_a), get_trace(path, text_b)
            return {"kind": "contrastive", "text_a": text_a, "text_b": text_b, "hook": hook,
                    "prompt_a": get_prompt(path, text_a), "prompt_b": get_prompt(path, text_b),
                    "cut_a": ta.truncated, "cut_b": tb.truncated}
        what = f"mean activation over A's positions minus mean over B's at {hook}"
    c1, c2 = st.columns([3, 2])
    alpha = shared_widget(c1.slider, "α (in the unit below)", -ALPHA_MAX, ALPHA_MAX, key="alpha", default=4.0,
                          valid=lambda v: -ALPHA_MAX <= v <= ALPHA_MAX, cast=float, step=0.25)
    where_words = {"all": "every position" + ("" if masked_lm else " (the generated ones too)"),
                   "last": "the text's last position only"}
    at = shared_widget(c2.radio, "Add it at", list(where_words), key="spos", default="all",
                       valid=where_words.__contains__, format_func=where_words.get)
    scale = "" if direction.unit == 1 else f" × {direction.unit:.4g}"
    st.caption(plain(f"Adds α{scale} × the direction: {what}. Unit of α: {direction.unit_words}"
                     + ("" if direction.unit == 1 else f" ({direction.unit:.4g})") + ". α = 0 is the intact model.",
                     limit=None))
    try:
        result = steer_gated(path, text, direction, key, float(alpha), at == "last", pos)
    except (ValueError, KeyError) as exc:
        st.error(f"The steered run failed: {plain(error_line(exc))}.")
        return
    if result is None:  # a slow model: waits for its button
        return
    source_code = code.steering_code(path, text, get_prompt(path, text), has_tokenizer, trace.truncated,
                                     source() if callable(source) else source, float(alpha), direction.unit,
                                     at == "last", pos, cfg.causal, N_NEW)
    left, right = side_by_side(state, [1, 1])
    with left:
        output_bars(result.intact, result.steered, "steered", f"steering_output_{alpha}",
                    f"{short_where}: intact vs steered")
    with right:
        if cfg.causal:
            st.markdown(f"**{len(result.gen_intact)} greedy tokens after the text**, intact and steered"
                        + (" (the direction added at every step)" if at == "all" else ""))
            try:
                shown = [continuation_text(state.tokenizer, list(ids), g) for g in (result.gen_intact,
                                                                                    result.gen_steered)]
                st.code(f"intact : {shown[0]!r}\nsteered: {shown[1]!r}", language=None, wrap_lines=True)
            except ValueError as exc:
                st.error(plain(error_line(exc)))
            with st.expander("Token by token"):
                show_table(continuation_frame(result.gen_intact, result.gen_steered, vocab), state, hide_index=True)
        else:
            st.caption("An encoder fills in positions all at once: there is no continuation.")
    export("steering", source_code)


# ---- Feature ablation -----------------------------------------------------------------------------------------

def ablate_part() -> None:
    if not sets:
        st.info(f"No sparse dictionary for {plain(state.model_name)} yet: train some (or upload SAELens folders) "
                "below. Steering with text A minus text B works without one.", icon=":material/dictionary:")
        return
    picked = pick_dictionary()
    if picked is None:
        return
    folders, row, hooks, acts = picked
    active = strongest_features(acts)
    options = active[:200]
    feats = st.multiselect(f"Features of {hooks[row]} switched off at every position (listed: the {len(options)} "
                           "active on this text, strongest first)", options, default=options[:3],
                           key=f"ablate_features_{row}_{hash(ids)}",  # a new text: a new default
                           format_func=lambda f: f"{f} (peak {acts[:, f].max():.3g})")
    st.caption("Ablating replaces the hook's value by the dictionary's reconstruction without these features plus "
               "the dictionary's error (Marks et al. 2024): value − Σ f_i · W_dec[i]. Switching none off leaves the "
               "model exactly as it was.")
    feats_key = tuple(sorted(int(f) for f in feats))
    try:
        result = ablate_gated(path, text, folders[row], feats_key, pos)
    except (ValueError, KeyError) as exc:
        st.error(f"The ablated run failed: {plain(error_line(exc))}.")
        return
    source_code = code.ablation_code(path, text, get_prompt(path, text), has_tokenizer, trace.truncated, folders[row],
                                     list(feats_key), pos)
    if result is None:
        return
    left, right = side_by_side(state, [3, 2])
    name = ", ".join(map(str, feats_key)) or "none"
    with left:
        output_bars(result.intact, result.ablated, "ablated", f"feature_ablation_{row}_{name}",
                    f"{short_where}: intact vs {len(feats_key)} feature{'s' if len(feats_key) != 1 else ''} off")
    with right:
        changes = biggest_changes(result.intact, result.ablated, vocab)
        if len(changes):
            show_figure(delta_bars(changes, "Largest rises and falls"), state, f"feature_ablation_delta_{row}",
                        data=lambda: changes)
            st.caption("Over the whole vocabulary; changes under 0.1 percentage point are left out.")
        else:
            st.info("No token's probability changed by 0.1 percentage point or more.")
    show_figure(kl_figure(result.kl, trace.labels, "How far the output moved at every position", marked=pos), state,
                f"feature_ablation_kl_{row}")
    st.caption("KL(intact ‖ ablated) in nats: 0 where ablating the features changes nothing"
               + ("." if masked_lm else "; a position before the first place the features fire cannot change "
                  "(a decoder reads only earlier positions)."))
    export("feature_ablation", source_code)


if part == "steer":
    steer_part()
else:
    ablate_part()
st.divider()
manage_dictionaries(state)
show_link(state)
