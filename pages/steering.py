"""Steering & feature ablation: add a direction to the residual stream (a sparse dictionary's feature, or the
difference of two texts' mean activations) and watch the output and the greedy continuation change; switch a
dictionary's features off and see what the output loses."""

from typing import NamedTuple

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
from viz_ui.app.layout import (MAX_CHARS, get_shared, pick_index, set_shared, shared_value, shared_widget, show_code,
                           show_figure, show_link, show_table, side_by_side)
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.state import export_load_args, get_trace
from viz_ui.app.steering import (N_NEW, Direction, ablate_gated, feature_direction, get_contrastive, steer_gated)
from viz_ui.views.steering import (compare_bars, compare_table, continuation_frame, kl_figure, strongest_features,
                                  top_change_words)
from viz_ui.analysis.text import error_line, plain
from viz_model.tokenizer import IdTokenizer

ALPHA_MAX = 10.0  # the slider's range, in the direction's unit
PARTS = {"steer": "Steering", "ablate": "Feature ablation"}
CONTRAST = ("Happy, happy, happy. She laughed and smiled.", "Sad, sad, sad. She cried and frowned.")

class Target(NamedTuple):
    """The output measured: the position ``pos`` (a decoder's last; a masked LM's chosen one) and its words."""

    pos: int
    unit_words: str  # e.g. "next token after “mat”", as Markdown (the token escaped)
    short_where: str  # e.g. "Next token", in figure titles


class Steering(NamedTuple):
    """A direction to steer with, the cache key of its runs, where it came from (for the exported script: a dict,
    or a function returning it) and what it is, in words."""

    direction: Direction
    key: tuple
    source: object
    what: str


def unsupported(ctx: PageContext) -> bool:
    """Says so and returns True for a model this page cannot steer (no language-model head, or an encoder-decoder)."""
    model, cfg = ctx.model, ctx.cfg
    if model.has_lm_head and not cfg.is_encoder_decoder:
        return False
    st.info("This page steers decoder-only and encoder (masked LM) models with a language-model head"
            + (": this checkpoint ends in hidden states." if not model.has_lm_head else
               "; this one is an encoder-decoder (its decoder's runs are on Cause and effect).")
            + " The other pages work on it.", icon=":material/block:")
    return True


def has_tokenizer(ctx: PageContext) -> bool:
    return not isinstance(ctx.tokenizer, IdTokenizer)


def pick_target(ctx: PageContext) -> Target:
    """A masked LM's position (the shared ``query``); a decoder's last position."""
    trace, n = ctx.trace, ctx.trace.n_tokens
    if ctx.cfg.causal:
        return Target(n - 1, f"next token after “{plain(trace.labels[n - 1])}”", "Next token")
    masks = mask_positions(ctx.tokenizer, trace.ids)
    pos = pick_index(st, "The token the model fills in at position", "query", n, masks[0] if masks else n - 1,
                     lambda i: f"{i} {trace.labels[i]}")
    return Target(pos, "token at this position", f"Token at position {pos}")


def pick_dictionary(ctx: PageContext, sets: dict) -> tuple[tuple[str, ...], int, list[str], object] | None:
    """The dictionary set (shared with the Features page's choice in this session) and the dictionary in it
    (``flayer`` in the link); None, with one line, when the set cannot be used."""
    label = st.selectbox("Dictionaries", list(sets), key="feature_set") if len(sets) > 1 else next(iter(sets))
    folders = sets[label]
    try:
        feats = get_text_features(ctx.path, tuple(int(i) for i in ctx.trace.ids), folders)
    except (CheckpointError, KeyError, ValueError, OSError) as exc:
        st.error(f"These dictionaries cannot be used with this model: {plain(error_line(exc))}.")
        return None
    row = pick_index(st, "Dictionary", "flayer", len(feats.hooks), len(feats.hooks) // 2, lambda i: feats.hooks[i])
    return folders, row, feats.hooks, feats.acts[row]


def output_bars(ctx: PageContext, target: Target, before, after, after_name: str, view: str, title: str) -> None:
    vocab = ctx.vocab
    table = compare_table(before, after, vocab, after_name)
    show_figure(compare_bars(table, title, after_name), ctx.app, view, data=lambda: table)
    t0, p0, t1, p1 = top_change_words(before, after, vocab)
    st.markdown(f"Top {target.unit_words}: **{plain(t0)}** ({p0:.1%}) intact → **{plain(t1)}** ({p1:.1%}) {after_name}."
                + (" The top prediction changed." if t0 != t1 else ""))


# ---- Steering -------------------------------------------------------------------------------------------------

def feature_steering(ctx: PageContext, sets: dict) -> Steering | None:
    """A dictionary feature's decoder direction (the shared ``feature``); None when the set cannot be used."""
    path, ids = ctx.path, tuple(int(i) for i in ctx.trace.ids)
    picked = pick_dictionary(ctx, sets)
    if picked is None:
        return None
    folders, row, hooks, acts = picked
    d = dictionary(folders[row])
    strongest = strongest_features(acts[-1:])
    default = strongest[0] if strongest else 0
    feature = shared_value("feature", default, valid=lambda v: 0 <= v < d.d_sae, cast=int)
    feature = st.number_input(f"Feature (0–{d.d_sae - 1}; default: the strongest at the last token)", 0,
                              d.d_sae - 1, feature, key=f"steer_feature_{row}")
    if feature != get_shared("feature"):
        set_shared("feature", int(feature))
    direction = feature_direction(path, ids, folders, row, int(feature))
    key = ("feature", folders[row], int(feature))
    source = {"kind": "feature", "folder": folders[row], "feature": int(feature)}
    what = (f"feature {feature} of {hooks[row]}: its decoder row W_dec[{feature}] (norm "
            f"{float((direction.vector ** 2).sum() ** 0.5):.3g}) added at {direction.hook}")
    return Steering(direction, key, source, what)


def contrastive_steering(ctx: PageContext) -> Steering | None:
    """Text A's mean activation minus text B's at one layer; None until both texts are typed."""
    path, cfg = ctx.path, ctx.cfg
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
        return None
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
    return Steering(direction, key, source, what)


def steer_part(ctx: PageContext, sets: dict, target: Target) -> None:
    """Add α × a direction to the residual stream and compare the output and the greedy continuation."""
    path, text, trace, cfg, vocab, pos = ctx.path, ctx.trace.text, ctx.trace, ctx.cfg, ctx.vocab, target.pos
    masked_lm, ids = not cfg.causal, tuple(int(i) for i in ctx.trace.ids)
    kinds = {"feature": "a dictionary feature's decoder direction", "contrastive": "text A minus text B"}
    if sets:
        kind = shared_widget(st.radio, "Steer with", list(kinds), key="steer", default="feature",
                             valid=kinds.__contains__, format_func=kinds.get, horizontal=True)
    else:
        kind = "contrastive"
        st.caption(f"Steering with text A minus text B: there is no sparse dictionary for {plain(ctx.app.model_name)} "
                   "yet (train or upload some below to steer with their features).")
    steering = feature_steering(ctx, sets) if kind == "feature" else contrastive_steering(ctx)
    if steering is None:
        return
    direction, key, source, what = steering
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
    source_code = code.steering_code(path, text, get_prompt(path, text), has_tokenizer(ctx), trace.truncated,
                                     source() if callable(source) else source, float(alpha), direction.unit,
                                     at == "last", pos, cfg.causal, N_NEW, export_load_args(ctx.model))
    steered_output(ctx, target, result, alpha, at == "all")
    show_code(ctx.app, "steering", source_code, "checkpoint, text and dictionary")


def steered_output(ctx: PageContext, target: Target, result, alpha: float, everywhere: bool) -> None:
    """The steered run's output next to the intact one's, and (a decoder's) greedy continuations."""
    cfg, vocab, ids = ctx.cfg, ctx.vocab, [int(i) for i in ctx.trace.ids]
    left, right = side_by_side(ctx.app, [1, 1])
    with left:
        output_bars(ctx, target, result.intact, result.steered, "steered", f"steering_output_{alpha}",
                    f"{target.short_where}: intact vs steered")
    with right:
        if cfg.causal:
            st.markdown(f"**{len(result.gen_intact)} greedy tokens after the text**, intact and steered"
                        + (" (the direction added at every step)" if everywhere else ""))
            try:
                shown = [continuation_text(ctx.tokenizer, ids, g) for g in (result.gen_intact, result.gen_steered)]
                st.code(f"intact : {shown[0]!r}\nsteered: {shown[1]!r}", language=None, wrap_lines=True)
            except ValueError as exc:
                st.error(plain(error_line(exc)))
            with st.expander("Token by token"):
                show_table(continuation_frame(result.gen_intact, result.gen_steered, vocab), ctx.app, hide_index=True)
        else:
            st.caption("An encoder fills in positions all at once: there is no continuation.")


# ---- Feature ablation -----------------------------------------------------------------------------------------

def ablate_part(ctx: PageContext, sets: dict, target: Target) -> None:
    """Switch a dictionary's features off at every position and compare the output."""
    path, text, trace, vocab, pos = ctx.path, ctx.trace.text, ctx.trace, ctx.vocab, target.pos
    masked_lm, ids = not ctx.cfg.causal, tuple(int(i) for i in ctx.trace.ids)
    if not sets:
        st.info(f"No sparse dictionary for {plain(ctx.app.model_name)} yet: train some (or upload SAELens folders) "
                "below. Steering with text A minus text B works without one.", icon=":material/dictionary:")
        return
    picked = pick_dictionary(ctx, sets)
    if picked is None:
        return
    folders, row, hooks, acts = picked
    active = strongest_features(acts)
    options = active[:200]
    feats = st.multiselect(f"Features of {plain(hooks[row])} switched off at every position (listed: the {len(options)} "
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
    source_code = code.ablation_code(path, text, get_prompt(path, text), has_tokenizer(ctx), trace.truncated, folders[row],
                                     list(feats_key), pos, export_load_args(ctx.model))
    if result is None:
        return
    left, right = side_by_side(ctx.app, [3, 2])
    name = ", ".join(map(str, feats_key)) or "none"
    with left:
        output_bars(ctx, target, result.intact, result.ablated, "ablated", f"feature_ablation_{row}_{name}",
                    f"{target.short_where}: intact vs {len(feats_key)} feature{'s' if len(feats_key) != 1 else ''} off")
    with right:
        changes = biggest_changes(result.intact, result.ablated, vocab)
        if len(changes):
            show_figure(delta_bars(changes, "Largest rises and falls"), ctx.app, f"feature_ablation_delta_{row}",
                        data=lambda: changes)
            st.caption("Over the whole vocabulary; changes under 0.1 percentage point are left out.")
        else:
            st.info("No token's probability changed by 0.1 percentage point or more.")
    show_figure(kl_figure(result.kl, trace.labels, "How far the output moved at every position", marked=pos), ctx.app,
                f"feature_ablation_kl_{row}")
    st.caption("KL(intact ‖ ablated) in nats: 0 where ablating the features changes nothing"
               + ("." if masked_lm else "; a position before the first place the features fire cannot change "
                  "(a decoder reads only earlier positions)."))
    show_code(ctx.app, "feature_ablation", source_code, "checkpoint, text and dictionary")


ctx = open_page("Steering & feature ablation",
                "Push the running model along a direction in its residual stream (a feature of a sparse dictionary, "
                "or what separates two texts) and watch its output and its continuation change; or switch features "
                "off and see what the output loses. Every number comes from runs of the model with hooks.")
if unsupported(ctx):
    show_link(ctx.app)
    st.stop()
adopt_finished()  # a dictionary training of this session that has ended joins the sets first
sets = dictionary_sets(ctx.path)
part = shared_widget(st.radio, "View", list(PARTS), key="spart", default="steer", valid=PARTS.__contains__,
                     horizontal=True, format_func=PARTS.get, label_visibility="collapsed")
target = pick_target(ctx)
if part == "steer":
    steer_part(ctx, sets, target)
else:
    ablate_part(ctx, sets, target)
st.divider()
manage_dictionaries(ctx.app)
show_link(ctx.app)
