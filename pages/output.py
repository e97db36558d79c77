"""Output: the next-token distribution (or, for a masked-LM encoder, the prediction at a [MASK]),
temperature, top-k / top-p, and generation."""

from typing import NamedTuple

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.views.figures import generation_heatmap, topk_bar
from viz_ui.analysis.generation import (attention_rows, continuation_text, generate_records, mask_positions, next_token_view,
                                salient_head)
from viz_ui.app.layout import pick_index, set_shared, shared_number, show_figure, show_link, show_table
from viz_ui.app.page import PageContext, open_page
from viz_ui.views.tables import kv_table, steps_table, topk_table
from viz_ui.views.output import TEMPERATURE_STEP, TEMPERATURES, next_token_bars, next_token_title
from viz_ui.analysis.text import plain
from viz_ui.app.output import TEMPERATURE_LABEL, temperature_chart_frames


class Sampling(NamedTuple):
    """The position whose prediction is shown and how it is sampled: temperature T (0 = greedy), top-k (0 = all)
    and top-p."""

    pos: int
    temperature: float
    top_k: int
    top_p: float


def masked_lm_note(ctx: PageContext, masks: list[int]) -> None:
    st.markdown("This is a **masked-language-model encoder** (BERT): it sees the whole text at once and predicts, "
                "at each position, which token belongs *there*. Write `[MASK]` in the text to hide a word; the "
                "prediction at that position is the model's guess."
                + (f" Masks found at positions {', '.join(map(str, masks))}." if masks else
                   " No [MASK] in the text: the predictions below are for the visible tokens themselves."))


def pick_sampling(ctx: PageContext, masks: list[int] | None) -> Sampling:
    """The shared position, temperature, top-k and top-p controls (``masks``: a masked LM's [MASK] positions, None
    for a decoder)."""
    trace = ctx.trace
    c1, c2, c3, c4 = st.columns([2, 2, 1, 1])
    if masks is not None:
        pos = pick_index(c1, "Prediction at position", "query", trace.n_tokens, masks[0] if masks else trace.n_tokens - 1,
                         lambda i: f"{i} {trace.labels[i]}")
    else:
        pos = pick_index(c1, "Prediction after position", "query", trace.n_tokens, trace.n_tokens - 1,
                         lambda i: f"{i} {trace.labels[i]}")
    temperature = shared_number(c2.slider, TEMPERATURE_LABEL, "temperature", TEMPERATURES[0], TEMPERATURES[-1], 1.0, float,
                                step=TEMPERATURE_STEP,
                                help="Divides the logits before softmax: T < 1 sharpens the distribution, T > 1 flattens it.")
    top_k = shared_number(c3.number_input, "top-k (0 = all)", "top_k", 0, ctx.cfg.d_vocab, 0, int)
    top_p = shared_number(c4.slider, "top-p", "top_p", 0.05, 1.0, 1.0, float, step=0.05,
                          help="Keep the most likely tokens whose mass reaches p.")
    return Sampling(pos, temperature, int(top_k), float(top_p))


def next_token(ctx: PageContext, sampling: Sampling, masks: list[int] | None) -> None:
    """The distribution at the chosen position after temperature, top-k and top-p: metrics, bars and table."""
    trace, vocab, masked_lm = ctx.trace, ctx.vocab, masks is not None
    pos, temperature = sampling.pos, sampling.temperature
    logits = trace.arrays["hook_logits"][pos]
    if masked_lm:  # the token written at the position, unless it is the [MASK] itself
        actual = None if pos in masks else int(trace.ids[pos])
    else:
        actual = int(trace.ids[pos + 1]) if pos + 1 < trace.n_tokens else None
    view = next_token_view(logits, temperature, sampling.top_k, sampling.top_p, actual)
    probs = view.probs
    n_bars = st.slider("Tokens shown", 5, 30, 10, key="n_bars")
    # only tokens left with a probability above 0: T = 0, top-k and top-p leave the others at exactly 0
    ids, highlight = next_token_bars(probs, n_bars, actual)
    table = topk_table(probs, logits, vocab, len(ids))
    greedy = temperature == 0

    m1, m2, m3 = st.columns(3)
    here = "Most likely token here" if masked_lm else "Most likely next token"
    m1.metric("Greedy pick (highest logit)" if greedy else here, plain(table["token"][0]),
              f"logit {table['logit'][0]:.2f}" if greedy else f"p = {table['probability'][0]:.1%}",
              delta_color="off", delta_arrow="off")
    m2.metric("Entropy of the distribution", "0 bits (greedy)" if greedy else f"{view.entropy:.2f} bits")
    if actual is not None:
        m3.metric("The token in the text" if masked_lm else "The text's real next token", plain(vocab[actual]), f"p = {view.actual_prob:.2%}, rank {view.actual_rank} by logit",
                  delta_color="off", delta_arrow="off")
    if greedy:
        st.markdown(f"**T = 0 is greedy: the highest-scoring token is taken**, here **{plain(table['token'][0])}** "
                    "(it gets probability 1, every other token 0, so there is nothing else to draw). The second chart "
                    "shows the runners-up by logit with their probabilities at T = 1, for comparison.")
    fig = topk_bar(table["token"].tolist(), table["probability"].to_numpy(),
                   next_token_title(trace.labels, pos, temperature, masked_lm), highlight)
    # the chart at every temperature of the slider: a move redraws it in the browser at once (viz_ui/views/output.py)
    show_figure(fig, ctx.app, f"next_token_pos{pos}_T{temperature:g}", live="next_token",
                frames=temperature_chart_frames(fig, ctx.app.model_path, trace.text, pos, temperature, sampling.top_k,
                                                sampling.top_p, n_bars, actual, masked_lm, ctx.display.scale))
    if greedy:
        at_one = next_token_view(logits, 1.0, 0, 1.0).probs
        runners = topk_table(at_one, logits, vocab, 5)  # at T = 1 the order by probability is the order by logit
        show_figure(topk_bar(runners["token"].tolist(), runners["probability"].to_numpy(),
                             "For comparison: the 5 highest logits, with their probabilities at T = 1",
                             highlight=0, x_title="probability at T = 1"),
                    ctx.app, f"next_token_pos{pos}_T1_compare", live="next_token_compare")
    if len(table) < n_bars and not greedy:
        st.caption(f"{len(table)} token{'s' if len(table) > 1 else ''} left with a probability above 0 after "
                   "top-k / top-p; the others are not drawn.")
    with st.expander("As a table (with logits)"):
        show_table(table, ctx.app, fmt={"probability": "{:.4f}", "logit": "{:.3f}"}, hide_index=True)


def generate(ctx: PageContext, sampling: Sampling) -> tuple[tuple, list] | None:
    """The Generate controls and button; the generation of these settings, ``(settings, records)``, once it ran
    (kept in ``st.session_state["generated"]``), else None."""
    trace, vocab = ctx.trace, ctx.vocab
    st.subheader("Generate")
    st.markdown("Generation repeats the last step: pick a token from the distribution above (the most likely one "
                "when T = 0, otherwise a random draw with the seed below), append it, and run the model again.")
    g1, g2, g3 = st.columns([1, 1, 2])
    n_new = shared_number(g1.number_input, "Tokens to generate", "n_new", 1, 200, 20, int)
    seed = shared_number(g2.number_input, "Seed", "seed", 0, 2**31 - 1, 0, int, help="The same seed gives the same tokens.")
    room = ctx.cfg.n_ctx - trace.n_tokens + 1  # the last new token is predicted, never read
    temperature, top_k, top_p = sampling.temperature, sampling.top_k, sampling.top_p
    settings = (ctx.app.model_name, trace.text, temperature, top_k, top_p, int(seed), int(n_new))
    if room <= 0:
        st.info("The context is full: there is no room to generate more tokens.")
    elif g3.button("Generate", type="primary", icon=":material/play_arrow:"):
        records, out, bar = [], st.empty(), st.progress(0.0, text="Generating…")
        for record in generate_records(ctx.model, trace.ids.tolist(), int(n_new), temperature, top_k, top_p,
                                       int(seed)):
            records.append(record)
            bar.progress(len(records) / min(int(n_new), room), text=f"Generated {len(records)} tokens")
            with out.container():
                show_table(steps_table(records, vocab), ctx.app, hide_index=True)
        out.empty()
        bar.empty()
        st.session_state["generated"] = {"settings": settings, "records": records}
    generated = st.session_state.get("generated")
    return (settings, generated["records"]) if generated and generated["settings"] == settings else None


def continuation(ctx: PageContext, records: list) -> bool:
    """The generated continuation, its steps and the "Append to my text" button; False when the tokenizer cannot
    write the new ids (its message is shown)."""
    trace = ctx.trace
    try:
        new_text = continuation_text(ctx.tokenizer, trace.ids.tolist(), [r.token_id for r in records])
    except ValueError as exc:  # an uploaded tokenizer that fails or panics on these ids
        st.error(plain(str(exc)))
        return False
    st.markdown("**Continuation:**")
    st.code(trace.text + "⟨" + new_text + "⟩" if new_text else trace.text, language=None, wrap_lines=True)
    show_table(steps_table(records, ctx.vocab), ctx.app, hide_index=True, column_config={
        "probability (as sampled)": st.column_config.ProgressColumn(format="%.3f", min_value=0, max_value=1),
        "probability (T = 1)": st.column_config.NumberColumn(format="%.4f")})
    if st.button("Append to my text", icon=":material/add:"):
        set_shared("text", trace.text + new_text)
        st.rerun(scope="app")  # the sidebar and the trace change too, not only this fragment
    return True


def generation_attention(ctx: PageContext, settings: tuple, records: list) -> None:
    """One head's (or the heads' mean) attention of each new token, and the KV cache's work at each step."""
    trace, vocab, cfg = ctx.trace, ctx.vocab, ctx.cfg
    st.subheader("Attention while generating")
    st.markdown("Each row is one step: the newest token (the query) looks back over everything so far, and the "
                "model picks the next token from the result. Generation uses a **KV cache**: the keys and values "
                "of earlier tokens are stored, so each step computes q, k and v for the newest token only.")
    # starts on the most salient head of this generation (viz_ui.analysis.generation.salient_head); the widgets are
    # keyed by the settings, so a new generation starts on its own most salient head again
    best_layer, best_head = salient_head(records)
    a1, a2 = st.columns(2)
    key = abs(hash(settings)) % 10**8
    layer = a1.selectbox("Layer", range(cfg.n_layers), index=best_layer, key=f"gen_layer_{key}")
    head_choice = a2.selectbox("Head", ["mean of all heads", *range(cfg.n_heads)], index=best_head + 1,
                               key=f"gen_head_{key}")
    head = None if head_choice == "mean of all heads" else int(head_choice)
    st.caption(f"It starts on layer {best_layer}, head {best_head}: of every head, the one whose newest token puts "
               "the most weight on one particular token other than itself and the first (averaged over the steps), so the "
               "view shows a head that looks somewhere in particular rather than at the attention sink.")
    prompt = trace.ids.tolist()
    all_labels = trace.labels + [vocab[r.token_id] for r in records]
    queries = [len(prompt) - 1 + s for s in range(len(records))]
    rows = [f"{q} {all_labels[q]} → {vocab[r.token_id]}" for q, r in zip(queries, records)]
    show_figure(generation_heatmap(attention_rows(records, layer, head), rows, all_labels[:records[-1].attention.shape[-1]],
                                   f"Attention of each new token, layer {layer}, "
                                   f"{'mean of heads' if head is None else f'head {head}'}"),
                ctx.app, f"generation_attention_L{layer}")
    st.markdown("**The KV cache at work**")
    show_table(kv_table(records, queries, all_labels), ctx.app, hide_index=True)
    recomputed = [s for s, r in enumerate(records) if s and r.n_reused == 0]
    if recomputed:  # LongRoPE (viz_model.rotary.cache_needs_recompute)
        s = recomputed[0]
        st.caption(f"Step {s + 1} computed all {records[s].n_computed} positions again: the text became longer than "
                   f"the {cfg.rotary_original_ctx:,} tokens of this model's pre-training context, so LongRoPE "
                   "switched to its long factors, and the cached keys, turned with the short ones, were dropped "
                   "(as transformers' Phi-3 does).")


@st.fragment
def next_token_and_generation(ctx: PageContext, masks: list[int] | None) -> None:
    """Everything below the page's header, as a fragment: moving the temperature (or any control here) reruns
    only this part, not the sidebar, the trace lookup and the page around it (bench/latency.py). ``masks``: a masked
    LM's [MASK] positions, None for a decoder."""
    # The fragment draws the sidebar's link on every run, full or its own: Streamlit lets a fragment rerun write
    # to a container made outside it only if the fragment wrote there during the last full run too.
    ctx.app.shown_link = ""
    sampling = pick_sampling(ctx, masks)
    next_token(ctx, sampling, masks)
    if masks is not None:
        st.caption("An encoder fills in masked positions all at once; it does not generate text left to right, "
                   "so there is no generation here.")
    elif ctx.trace.is_encoder_decoder:
        st.caption("These are the decoder's predictions at each position of its own output (the source is on the "
                   "Tokens page). Generation step by step, with the cross-attention of each new token, is on page 5.")
        st.page_link("pages/encoder_decoder.py", label="5 · Encoder-decoder & cross-attention", icon=":material/swap_horiz:")
    else:
        generated = generate(ctx, sampling)
        if generated is not None and continuation(ctx, generated[1]):
            generation_attention(ctx, *generated)
        elif generated is not None:
            return  # the tokenizer cannot write the continuation: its message is shown
    show_link(ctx.app)  # after every widget of the page, so the link holds n_new and seed too


ctx = open_page("Output probabilities",
                "At every position the model's output head turns the last layer's vector into one score (logit) "
                "per vocabulary token; softmax(logits / T) turns the scores into probabilities.",
                needs_lm_head="This checkpoint has no language-model head: it ends in hidden states (e.g. a "
                              "sentence-embedding encoder), so there are no output probabilities to show. Every other "
                              "page works on it.")
masks = None if ctx.cfg.causal else mask_positions(ctx.tokenizer, ctx.trace.ids)
if masks is not None:
    masked_lm_note(ctx, masks)
next_token_and_generation(ctx, masks)
