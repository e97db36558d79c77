"""Circuits: why the model produced its output, as an attribution graph (features, errors, tokens) or, for a model
without transcoders, a contribution graph."""

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

import json

import numpy as np
import pandas as pd
import torch

from viz_model import CheckpointError
from viz_model.circuits import CircuitError, graph_scores, ranked_heads, subgraph_scores
from viz_model.circuits.graph_json import GraphFileError, node_id, node_index, to_graph_json
from viz_ui.analysis.circuits import MAX_PROMPT, node_edges
from viz_ui.analysis.text import plain, plotly_text
from viz_ui.app.circuit_graph import circuit_graph, clean_view, keep_in_link, view_state
from viz_ui.app.circuits import (attribution_graph, contribution, head_split, intervention_runs, payload_json,
                                 supported, transcoder_sets, uploaded_graph)
from viz_ui.app.feature_card import show_feature_card
from viz_ui.app.features import dictionary, get_text_features
from viz_ui.app.layout import show_code, show_figure, show_link, show_table
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.qk_panel import qk_section
from viz_ui.app.state import export_load_args
from viz_ui.views.circuits import edges_table, heads_table, intervention_bars
from viz_ui.views.code_circuits import circuits_code, contribution_code

GRAPH_KEY = "circuit_graph"
N_NEW = 20


def prompt(ctx: PageContext) -> tuple[tuple[int, ...], bool]:
    """The token ids the graph explains (the text's, at most ``MAX_PROMPT``) and whether position 0 holds a special
    (beginning-of-sequence) token, whose features and error circuit-tracer leaves out of the graph."""
    ids = tuple(int(i) for i in ctx.trace.ids[:MAX_PROMPT])
    special = set()
    get = getattr(ctx.tokenizer, "get_added_tokens_decoder", None)
    if get is not None:
        special = {i for i, tok in get().items() if getattr(tok, "special", False)}
    if ctx.trace.n_tokens > MAX_PROMPT:
        st.caption(f"The graph explains the first {MAX_PROMPT} of the text's {ctx.trace.n_tokens} tokens: what the "
                   f"model predicts after token {MAX_PROMPT - 1} ({plain(ctx.trace.labels[MAX_PROMPT - 1])}).")
    return ids, bool(ids) and ids[0] in special


def save_view() -> None:
    """The graph's on_change: keep the view the browser reports in the link."""
    keep_in_link(view_state(GRAPH_KEY, st.session_state.get("_cg_contribution", False)),
                 st.session_state.get("_cg_contribution", False))


def draw(ctx: PageContext, key: tuple, graph, labels: list[str], folders: tuple[str, ...] = (),
         contribution_mode: bool = False) -> dict:
    """The graph component; returns the view it shows."""
    st.session_state["_cg_contribution"] = contribution_mode
    view = view_state(GRAPH_KEY, contribution_mode)
    text = payload_json(key, graph, labels, ctx.vocab, folders)
    rows = 2 * ctx.cfg.n_layers + 1 if contribution_mode else ctx.cfg.n_layers + 2
    height = int(min(1400, (36 if contribution_mode else 60) * rows + 120) * ctx.display.scale)
    drawn = circuit_graph(GRAPH_KEY, text, str(hash(key)), view, ctx.display.theme, ctx.display.scale, height,
                          ctx.display.export, f"circuit_{len(labels)}tokens", on_change=save_view,
                          lecture=ctx.lecture)
    if not drawn:
        st.info("The graph needs the app's static file serving (server.enableStaticServing, on in .streamlit/"
                "config.toml); download its JSON below to open it in Neuronpedia.", icon=":material/info:")
    return view


def node_of(graph, ident: str) -> int | None:
    """The node index of a JSON node id in ``graph``, or None."""
    return node_index(graph, ident) if ident else None


def scores(ctx: PageContext, graph, view: dict) -> None:
    """The whole graph's scores and the pinned subgraph's."""
    replacement, completeness = graph_scores(graph)
    c1, c2, c3 = st.columns(3)
    c1.metric("Replacement score", f"{replacement:.3f}", help="The share of the logits' end-to-end influence that "
              "reaches the tokens through features rather than error nodes (1 = no error on any path).")
    c2.metric("Completeness score", f"{completeness:.3f}", help="The share of every node's input, weighted by the "
              "node's influence, that comes from features and tokens rather than error nodes.")
    pinned = [i for i in (node_of(graph, p) for p in view["pinned"]) if i is not None and i < graph.n_features]
    if pinned:
        sub_r, sub_c = subgraph_scores(graph, pinned)
        c3.metric(f"Pinned subgraph ({len(pinned)} features)", f"{sub_r:.3f} / {sub_c:.3f}",
                  help="Replacement / completeness of the pinned features alone: every other feature counted as an "
                       "error node.")
    st.caption(f"{graph.n_nodes:,} nodes: {graph.n_features:,} features, {graph.n_layers * graph.n_pos:,} error nodes, "
               f"{graph.n_pos} tokens, {graph.n_logits} logits. Frozen: attention patterns, every norm's scale and "
               "every MLP output; an edge is the direct effect of one node on another in that linear model.")
    if graph.message:
        st.warning(graph.message, icon=":material/memory:")


def clicked_node(ctx: PageContext, graph, view: dict, folders: tuple[str, ...], ids: tuple[int, ...]) -> None:
    """The clicked node: its strongest inputs and outputs, and a feature's full card."""
    i = node_of(graph, view["clicked"])
    if i is None:
        return
    kind = graph.node_kind(i)
    layer, pos = graph.node_location(i)
    labels = [ctx.vocab[t] for t in ids]
    name = {"feature": "Feature", "error": "Error node", "token": "Token", "logit": "Logit"}[kind]
    st.subheader(f"{name}: {plain(view['clicked'])}")
    ins, outs = node_edges(graph, i)

    def row(j: int, w: float) -> tuple[str, str, int, float]:
        _, p = graph.node_location(j)
        return node_id(graph, j), graph.node_kind(j), p, round(w, 5)

    for column, title, edges, none in zip(st.columns(2), ("Inputs", "Outputs"), (ins, outs),
                                          ("tokens and error nodes have no inputs", "logit nodes have no outputs")):
        with column:
            st.markdown(f"**{title}** (largest first)")
            if edges:
                show_table(edges_table([row(j, w) for j, w in edges]), ctx.app)
            else:
                st.caption(f"None: {none} in the graph.")
    if kind == "feature":
        _, _, feat, act = graph.feature_of(i)
        folder = folders[layer]
        feats = get_text_features(ctx.path, ids, (folder,))
        st.markdown(f"Layer {layer}'s transcoder, feature {feat}: activation **{act:.3f}** at position {pos} "
                    f"({plain(labels[pos])}).")
        show_feature_card(ctx, dictionary(folder), folder, feat, feats.acts[0][:, feat], ids=list(ids))
    elif kind == "error":
        st.caption(f"What layer {layer}'s transcoder misses of its MLP's output at position {pos}: its direct effects "
                   "are real but unexplained by features.")


def edge_section(ctx: PageContext, graph, view: dict, ids: tuple[int, ...], folders: tuple[str, ...],
                 zero_first: bool) -> None:
    """The clicked edge: which heads carry it, and the QK split of the chosen head at (target, source)."""
    if not view.get("edge"):
        return
    source, target = (node_of(graph, e) for e in view["edge"])
    if source is None or target is None:
        return
    weight = float(graph.adjacency[target, source])
    _, s_pos = graph.node_location(source)
    _, t_pos = graph.node_location(target)
    st.subheader(f"Edge {plain(view['edge'][0])} → {plain(view['edge'][1])}: weight {weight:.4f}")
    if s_pos == t_pos:
        st.caption("Both ends sit at one position: this edge runs through the residual stream, not through a head.")
        return
    try:
        drops = torch.tensor(head_split(ctx.path, ids, folders, zero_first, target, source))
    except CircuitError as exc:
        st.info(plain(str(exc)), icon=":material/info:")
        return
    ranked = ranked_heads(drops, min_share=0.02)
    if not ranked:
        st.caption("No single head's cut changes this edge.")
        return
    st.markdown("Each row: the edge recomputed with that head passing no change (its output frozen), and how much it "
                "drops. A path may cross several heads, so the drops need not add up to the edge.")
    show_table(heads_table(ranked[:12], weight), ctx.app)
    names = [f"L{layer}H{head}" for layer, head, _ in ranked[:12]]
    pick = st.selectbox("Why does this head attend there?", names, key=f"cg_head_{source}_{target}")
    layer, head = int(pick[1:].split("H")[0]), int(pick.split("H")[1])
    qk_section(ctx.app, ctx.trace, layer, head, t_pos, s_pos, "circuits")


def interventions(ctx: PageContext, graph, view: dict, ids: tuple[int, ...], folders: tuple[str, ...]) -> None:
    """Scale or ablate a pinned node or supernode and compare the next tokens."""
    st.subheader("Intervene")
    groups = {f"supernode {g[0]}": g[1:] for g in view["supernodes"]}
    for p in view["pinned"]:
        i = node_of(graph, p)
        if i is not None and graph.node_kind(i) in ("feature", "error"):
            groups.setdefault(f"node {p}", [p])
    if not groups:
        st.caption("Pin a feature or error node (shift-click, or the Pin button of its card) to scale or ablate it "
                   "here.")
        return
    if st.session_state.get("cg_target") not in groups:  # pins changed since: start from the first
        st.session_state.pop("cg_target", None)
    target = st.selectbox("Pinned node or supernode", list(groups), key="cg_target")
    if target is None:
        return
    scale = st.slider("Scale its activation by", -2.0, 2.0, 0.0, 0.25, key="cg_scale",
                      help="0 ablates it; 1 leaves it as it is; −1 reverses it. Attention patterns stay as in the "
                           "clean run; the MLPs, norms and later features respond.")
    feats, errs = [], []
    for member in groups[target]:
        i = node_of(graph, member)
        if i is None:
            continue
        if graph.node_kind(i) == "feature":
            layer, pos, feat, act = graph.feature_of(i)
            feats.append((layer, pos, feat, scale * act))
        elif graph.node_kind(i) == "error":
            layer, pos = graph.node_location(i)
            errs.append((layer, pos, scale))
    stop = tuple(i for i in (getattr(ctx.tokenizer, "token_to_id", lambda t: None)("<|endoftext|>"),) if i is not None)
    intact, p_intact, changed, p_changed = intervention_runs(ctx.path, ids, folders, tuple(feats), tuple(errs), N_NEW,
                                                             stop)
    show_figure(intervention_bars(ctx.vocab, np.array(p_intact), np.array(p_changed),
                                  f"Next token, intact and with {plotly_text(target)} × {scale:g}"), ctx.app,
                "circuits_intervention")
    words = lambda toks: "".join(ctx.vocab[t] for t in toks).replace("·", " ")
    st.markdown(f"**{N_NEW} greedy tokens, intact:** {plain(words(intact))}")
    st.markdown(f"**With the intervention:** {plain(words(changed))}")


def files(ctx: PageContext, graph, view: dict, ids: tuple[int, ...]) -> None:
    """Download the graph as Neuronpedia's JSON."""
    if ctx.lecture:
        return
    q = {"pinnedIds": view["pinned"], "supernodes": view["supernodes"], "clickedId": view["clicked"]}
    data = lambda: json.dumps(to_graph_json(  # written when the button is clicked, not at every run
        graph, lambda i: ctx.vocab[i].replace("·", " "), slug="circuit",
        prompt="".join(ctx.vocab[t] for t in ids).replace("·", " "), node_threshold=view["node_t"],
        edge_threshold=view["edge_t"], q_params=q))
    st.download_button("Download the graph (Neuronpedia JSON)", data, file_name="circuit-graph.json",
                       mime="application/json", icon=":material/download:", key="cg_download",
                       help="The graph pruned at the thresholds above, with the pinned nodes and supernodes, in the "
                            "format Neuronpedia and circuit-tracer's local server read.")


def uploaded(ctx: PageContext) -> bool:
    """A graph JSON the user uploaded (:func:`upload_box`, at the end of the page), drawn as it is; True when one is
    shown (the model's own graph is then not)."""
    file = st.session_state.get("cg_upload")
    if file is None:
        return False
    try:
        data, payload = uploaded_graph(file.file_id, file.getvalue())
    except GraphFileError as exc:
        st.error(f"This file cannot be read as a graph: {plain(str(exc))}.", icon=":material/error:")
        return False
    meta = data["metadata"]
    st.info(f"Showing the uploaded graph {plain(meta['slug'])} ({len(data['nodes']):,} nodes, {len(data['links']):,} "
            f"links; transcoders: {plain(meta['scan']) or 'not named'}). It is drawn as the file holds it; remove the "
            "file below to see this model's own graph.", icon=":material/upload_file:")
    view = clean_view(data["qParams"] | {"pinned": data["qParams"]["pinnedIds"],
                                         "clicked": data["qParams"]["clickedId"]})
    circuit_graph("circuit_upload", payload, str(hash(payload)), view, ctx.display.theme, ctx.display.scale,
                  int(520 * ctx.display.scale), lecture=ctx.lecture)
    return True


def upload_box() -> None:
    """Where a graph file is uploaded (read by :func:`uploaded` at the next run)."""
    with st.expander("Open a graph file (Neuronpedia JSON)", icon=":material/upload_file:",
                     expanded=st.session_state.get("cg_upload") is not None):
        st.file_uploader("Graph JSON (at most 100 MB)", type=["json"], key="cg_upload",
                         help="A graph this page downloaded, or one from circuit-tracer or Neuronpedia: drawn as the "
                              "file holds it (checked before it is read: size, JSON, counts, ids, numbers).")


def attribution_page(ctx: PageContext, sets: dict) -> None:
    label = st.selectbox("Transcoders", list(sets), key="cg_set") if len(sets) > 1 else next(iter(sets))
    folders = sets[label]
    ids, zero_first = prompt(ctx)
    try:
        graph = attribution_graph(ctx.path, ctx.text, ids, folders, zero_first)
    except (CircuitError, CheckpointError, ValueError) as exc:
        st.error(f"No attribution graph for this model and these transcoders: {plain(str(exc))}.")
        return
    if graph is None:
        return
    labels = [ctx.vocab[t] for t in ids]
    key = ("attribution", ctx.path, ids, folders, zero_first)
    view = draw(ctx, key, graph, labels, folders)
    scores(ctx, graph, view)
    clicked_node(ctx, graph, view, folders, ids)
    edge_section(ctx, graph, view, ids, folders, zero_first)
    interventions(ctx, graph, view, ids, folders)
    files(ctx, graph, view, ids)
    show_code(ctx.app, "circuits", lambda: circuits_code(ctx.path, list(ids), folders, zero_first, view["node_t"],
                                                         view["edge_t"], export_load_args(ctx.model)),
              "checkpoint, prompt and transcoders")


def contribution_page(ctx: PageContext, why: str) -> None:
    if ctx.cfg.is_encoder_decoder:
        st.info("Attribution and contribution graphs follow one stack of blocks to its output; this model is an "
                "encoder-decoder. The Encoder-decoder page shows how its decoder reads the encoder (cross-attention).",
                icon=":material/info:")
        return
    st.info(why, icon=":material/info:")
    ids, _ = prompt(ctx)
    try:
        cg = contribution(ctx.path, ctx.text, ids)
    except CircuitError as exc:
        st.error(f"No contribution graph for this model: {plain(str(exc))}.")
        return
    if cg is None:
        return
    labels = [ctx.vocab[t] for t in ids]
    view = draw(ctx, ("contribution", ctx.path, ids), cg, labels, contribution_mode=True)
    st.caption("Each edge: how much one part of a residual update (a head reading a key position, the MLP, or the "
               "stream itself) makes up the update, as a share (Ferrando & Voita 2024, the LLM Transparency Tool's "
               "proximity importance, L1 norm). The threshold keeps the edges at or above it that lie on a path to "
               "the last position's output.")
    edge = view.get("edge")
    if edge and edge[0].startswith("I") and edge[1].startswith("A"):
        layer, q = (int(x) for x in edge[1][1:].split("_"))
        k = int(edge[0].split("_")[1])
        shares = cg.attn[layer, q, k]
        order = torch.argsort(shares, descending=True)[:8]
        st.subheader(f"Attention edge: layer {layer}, position {q} reads position {k}")
        show_table(pd.DataFrame({"head": [f"L{layer}H{int(h)}" for h in order],
                                 "importance": [round(float(shares[h]), 4) for h in order]}), ctx.app)
        head = int(order[0])
        qk_section(ctx.app, ctx.trace, layer, head, q, k, "circuits")
    show_code(ctx.app, "contribution_graph", lambda: contribution_code(ctx.path, list(ids), view["node_t"],
                                                                      export_load_args(ctx.model)), "checkpoint and prompt")


ctx = open_page("Circuits (attribution graphs)",
                "Why did the model produce its output? An attribution graph traces the prediction back through "
                "transcoder features to the prompt's tokens, edge by edge, and shows which heads carry each step.",
                needs_lm_head="Attribution graphs explain a prediction over the vocabulary; this checkpoint has no "
                              "language-model head.")
if not uploaded(ctx):
    reason = supported(ctx.model)
    sets = transcoder_sets(ctx.path, ctx.cfg.n_layers) if reason is None else {}
    if sets:
        attribution_page(ctx, sets)
    else:
        why = (f"Attribution graphs: {reason}. " if reason else
               "This model has no transcoders, so its graph is the contribution graph, which needs none. ") + (
            "For attribution graphs, train one transcoder per layer on the Features page (Train dictionaries → "
            "transcoders) and come back." if reason is None else "Its contribution graph follows.")
        contribution_page(ctx, why)
upload_box()
show_link(ctx.app)  # the view (thresholds, pins, ...) in the sidebar's link, and to a class following this screen
