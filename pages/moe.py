"""Mixture of experts: which experts the router chose for each token in each layer and with what weight, how
many tokens each expert received, the router's probabilities for one token, and what happens to the output when
an expert is disabled or a token is forced to one expert. Layers that keep a dense MLP (Qwen2-MoE's
``decoder_sparse_step``, ``mlp_only_layers``) have no router: the page names them and shows the others."""


import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.analysis.explain import dense_layers_note
from viz_ui.app.layout import (pick_position, require_trace, selected_points, set_position, set_shared, shared_widget, show_figure,
                           show_link, side_by_side)
from viz_ui.app.page import PageContext, open_page
from viz_ui.views.moe import (Routing, compare_bar, dense_weights, effect_by_position, expert_load, kl_bits,
                             layer_weights_heatmap, load_heatmap, moved_tokens, rerouted, router_probs_heatmap,
                             routing_from_arrays, routing_map, softmax)
from viz_ui.app.gated import moe_intervention_gated
from viz_ui.app.state import available_models, moe_model_names
from viz_ui.analysis.text import plain, plotly_text

def weights_rule(cfg) -> str:
    """How the chosen experts' outputs are weighted, in words."""
    return ("those probabilities rescaled to sum to 1" if cfg.norm_topk_prob else
            "those probabilities as they are (not rescaled: they sum to less than 1)")


def no_router(ctx: PageContext) -> None:
    """Why a dense model has nothing to show here, and which models have experts."""
    names = moe_model_names(available_models())
    st.info(f"The loaded model, {plain(ctx.app.model_name)}, is **dense**: every token goes through the same "
            "feed-forward network in every layer, so there is no router to show. "
            + ("Choose " + ", ".join(f"**{plain(n)}**" for n in names) + " in the sidebar to see routing."
               if names else "Load a mixture-of-experts model (Mixtral, Qwen2-MoE, OLMoE, or one trained with "
               "`python -m viz_model.training --n-experts 8`) to see routing."), icon=":material/hub:")


def how_routing_works(ctx: PageContext) -> None:
    """This model's experts, router and top-k rule, in words and as a formula."""
    cfg = ctx.cfg
    n_exp, k, n_layers, moe_layers = cfg.n_experts, cfg.experts_per_token, cfg.n_layers, cfg.moe_layers
    kind = {"swiglu": "SwiGLU", "geglu": "GeGLU"}.get(cfg.mlp, cfg.mlp.upper())
    shared = (f" Every token also goes through a **shared expert** ({cfg.d_shared_mlp} units), scaled by "
              "σ(x W_shared_gate), a gate between 0 and 1 of its own." if cfg.d_shared_mlp else "")
    dense = dense_layers_note(cfg)
    which = (f"Each of the {n_layers} layers has" if not dense else
             f"{len(moe_layers)} of the {n_layers} layers ({', '.join(f'L{i}' for i in moe_layers)}) have")
    st.markdown(f"{which} **{n_exp} experts**, {kind} networks of d_mlp = {cfg.d_mlp} units. "
                f"The router, a d_model × {n_exp} matrix W_router, scores the experts for each token; softmax turns the "
                f"scores into probabilities p; the token goes to the **{k} most probable** experts, whose outputs are "
                f"added with {weights_rule(cfg)}.{shared}"
                + (f" The other layers have no router: {dense}; the views below show only the mixture-of-experts layers."
                   if dense else ""))
    gate = rf"\tfrac{{p_e}}{{\sum_{{j \in \mathrm{{top}}_{{{k}}}(p)}} p_j}}" if cfg.norm_topk_prob else "p_e"
    extra = r" + \sigma(x\,W_{\mathrm{shared\,gate}})\,\mathrm{FFN}_{\mathrm{shared}}(x)" if cfg.d_shared_mlp else ""
    st.latex(rf"p = \mathrm{{softmax}}(x\,W_{{\mathrm{{router}}}}),\qquad \mathrm{{MoE}}(x) = "
             rf"\sum_{{e \in \mathrm{{top}}_{{{k}}}(p)}} {gate}\;\mathrm{{FFN}}_e(x){extra}")


def clicked(moe_layers: list[int]) -> None:
    """on_select of the token × layer map: the clicked cell's token and layer become the shared choices."""
    points = selected_points("moe_map")
    if points and points[0].get("curve_number") == 1:
        set_position(int(points[0]["x"]))
        set_shared("layer", moe_layers[int(points[0]["y"])])  # row -> the model's layer


def routing_overview(ctx: PageContext, routing: Routing) -> tuple[int, int]:
    """The experts every token used in every layer, one layer's weights and every expert's load; returns the
    chosen position and the busiest expert of the chosen layer."""
    trace, cfg, labels = ctx.trace, ctx.cfg, ctx.trace.labels
    n_exp, k, moe_layers = cfg.n_experts, cfg.experts_per_token, cfg.moe_layers
    row_of = {layer: row for row, layer in enumerate(moe_layers)}  # the figures' rows hold the MoE layers only
    dense = dense_layers_note(cfg)
    st.header("Which experts each token used")
    show_figure(routing_map(routing, labels, n_exp, f"Top-{k} experts per token and layer"
                            + (" (mixture-of-experts layers)" if dense else "")), ctx.app, "moe_map",
                select_key="moe_map", on_select=lambda: clicked(moe_layers))
    st.caption("Each cell is one token in one layer: its colour is the expert with the largest weight, the numbers are "
               f"the {'experts chosen, first choice first (3+5: experts 3 and 5)' if k <= 2 else 'first choice'}; hover for every chosen "
               "expert's weight. Click a cell to choose that token and layer below.")

    load = expert_load(routing.indices, n_exp)
    c1, c2 = st.columns(2)
    layer = shared_widget(c1.selectbox, "Layer", moe_layers, key="layer", default=moe_layers[0], valid=row_of.__contains__,
                          cast=int, format_func=lambda i: f"layer {i}")
    row = row_of[layer]
    pos = pick_position(c2, trace, "Token")
    left, right = side_by_side(ctx.app, 2)
    with left:
        show_figure(layer_weights_heatmap(dense_weights(routing, n_exp)[row], routing.probs[row], labels,
                                          f"Layer {layer}: expert weights per token"),
                    ctx.app, f"moe_layer_weights_L{layer}")
    with right:
        show_figure(load_heatmap(load, f"Load: tokens per expert ({trace.n_tokens} tokens × {k})", moe_layers), ctx.app,
                    "moe_load")
    even = trace.n_tokens * k / n_exp
    busiest, idlest = int(load[row].argmax()), int(load[row].argmin())
    st.caption(f"An even split would give every expert {even:.1f} tokens per layer. In layer {layer}, E{busiest} received "
               f"the most ({load[row, busiest]}) and E{idlest} the fewest ({load[row, idlest]}).")
    return pos, busiest


def router_probabilities(ctx: PageContext, routing: Routing, pos: int) -> None:
    """The router's probabilities for the token at ``pos`` in every layer."""
    cfg, labels = ctx.cfg, ctx.trace.labels
    n_exp, k, moe_layers, dense = cfg.n_experts, cfg.experts_per_token, cfg.moe_layers, dense_layers_note(cfg)
    quoted = f"{pos} “{plotly_text(labels[pos])}”"  # position and token, e.g. 16 “.”; Plotly reads <b>… as markup
    st.header(f"The router's probabilities for token {pos} “{plain(labels[pos])}”")
    chosen = dense_weights(routing, n_exp)[:, pos] > 0
    show_figure(router_probs_heatmap(routing.probs[:, pos], chosen, f"Router probabilities of {quoted} (✓ = chosen)",
                                     moe_layers),
                ctx.app, f"moe_router_pos{pos}", live="moe_router")
    st.caption(f"Each row is softmax(x W_router) in one {'mixture-of-experts ' if dense else ''}layer for this token: it sums to 1 over the {n_exp} experts; the "
               f"{k} largest are chosen. Click a cell of the map above to choose another token.")


def pick_intervention(ctx: PageContext, pos: int, busiest: int) -> tuple[str, int, int]:
    """The shared intervention controls: ``(action, layer or -1 for every MoE layer, expert)``, said in words."""
    cfg, labels = ctx.cfg, ctx.trace.labels
    n_exp, k, moe_layers, dense = cfg.n_experts, cfg.experts_per_token, cfg.moe_layers, dense_layers_note(cfg)
    row_of = {layer: row for row, layer in enumerate(moe_layers)}
    st.header("Interventions: change the routing, watch the output")
    actions = ["disable", "force"]
    c1, c2, c3 = st.columns([2, 1, 1])
    action = shared_widget(c1.radio, "Intervention", actions, key="moe_do", default="disable", valid=actions.__contains__,
                           horizontal=True, format_func=lambda a: {"disable": "Disable an expert",
                                                                  "force": f"Send token {pos} to one expert"}[a])
    where = shared_widget(c2.selectbox, "In", [-1, *moe_layers], key="moe_layer", default=-1,
                          valid=lambda v: v == -1 or v in row_of, cast=int,
                          format_func=lambda i: ("every MoE layer" if dense else "every layer") if i < 0 else f"layer {i}")
    expert = shared_widget(c3.selectbox, "Expert", list(range(n_exp)), key="moe_expert", default=busiest,
                           valid=lambda v: 0 <= v < n_exp, cast=int, format_func=lambda e: f"E{e}")
    everywhere = "every mixture-of-experts layer" if dense else "every layer"
    if action == "disable":
        st.markdown(f"**E{expert} is taken out** of {everywhere if where < 0 else f'layer {where}'}: its router logit "
                    "becomes −∞, so its probability is 0 and the other experts' probabilities are renormalised (softmax over "
                    f"the remaining experts); each token then goes to the {k} most probable remaining experts, weighted as "
                    f"this family does ({weights_rule(cfg)}). Tokens that had chosen E{expert} move to their next best expert.")
    else:
        st.markdown(f"**Token {pos} {plain(labels[pos])} is sent to E{expert} alone** in "
                    f"{everywhere if where < 0 else f'layer {where}'}: its other router logits become −∞, so E{expert} "
                    "gets probability 1 and weight 1; every other token is routed as before.")
    return action, where, expert


def intervention_effect(ctx: PageContext, routing: Routing, pos: int, after: tuple) -> None:
    """What the intervention's run (``after``: logits, expert indices and weights) changed: routes, the output at
    ``pos`` and at every position."""
    trace, cfg, vocab, labels = ctx.trace, ctx.cfg, ctx.vocab, ctx.trace.labels
    n_exp = cfg.n_experts
    quoted = f"{pos} “{plotly_text(labels[pos])}”"
    after_logits, after_idx, after_w = after
    before = trace.arrays["hook_logits"]
    kl = kl_bits(before, after_logits)
    changed = rerouted(routing, Routing(after_idx, after_w), n_exp)  # [n_moe, pos]
    p_before, p_after = softmax(before[pos]), softmax(after_logits[pos])
    top = moved_tokens(p_before, p_after)
    what = f"after {quoted}" if cfg.causal else f"at {quoted}"
    m1, m2, m3 = st.columns(3)
    m1.metric("Routes changed (token × layer)", f"{int(changed.sum())} of {changed.size}")
    m2.metric(f"Output change at token {pos} (KL)", f"{kl[pos]:.4f} bits")
    m3.metric("Most likely next token" if cfg.causal else "Most likely token here", plain(vocab[int(p_after.argmax())]),
              f"intact: {plain(vocab[int(p_before.argmax())])}", delta_color="off", delta_arrow="off")
    left, right = side_by_side(ctx.app, 2)
    with left:
        show_figure(compare_bar([vocab[i] for i in top], p_before[top], p_after[top],
                                f"Output {what}: intact vs after"), ctx.app, f"moe_effect_pos{pos}", live="moe_effect")
    with right:
        show_figure(effect_by_position(kl, labels, "Output change per position (KL)", changed.any(0)),
                    ctx.app, "moe_effect_by_position")
    st.caption("KL(intact ‖ after) of the output distribution at every position (T = 1); orange bars: positions whose "
               "routing changed in some layer. "
               + ("Later positions can move without a routing change of their own: attention reads the changed "
                  "positions." if cfg.causal else ""))


def intervention(ctx: PageContext, routing: Routing, pos: int, busiest: int) -> None:
    """Disable an expert or force a token to one, and watch the output."""
    action, where, expert = pick_intervention(ctx, pos, busiest)
    try:
        after = moe_intervention_gated(ctx.path, ctx.trace.text, action, None if where < 0 else where, expert, pos)
    except ValueError as exc:
        st.error(f"The intervention cannot be run: {plain(str(exc))}.")
        st.stop()
    if after is not None:  # None: a slow model's run waits for its button
        intervention_effect(ctx, routing, pos, after)


ctx = open_page("Mixture of experts",
                "In a mixture-of-experts model each block has several feed-forward networks (experts) and a router "
                "that sends every token to a few of them: the parameters grow with the number of experts, the work "
                "per token does not.", needs_trace=False)
if not ctx.cfg.n_experts:
    no_router(ctx)
    show_link(ctx.app)
    st.stop()
require_trace(ctx.app)
routing = routing_from_arrays(ctx.trace.arrays, ctx.cfg.moe_layers)
how_routing_works(ctx)
position, busiest = routing_overview(ctx, routing)
router_probabilities(ctx, routing, position)
intervention(ctx, routing, position, busiest)
show_link(ctx.app)
