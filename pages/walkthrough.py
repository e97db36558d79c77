"""Guided walkthrough: the whole pipeline in order, with the live model and the current text."""

import numpy as np
import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.analysis.block import layernorm_stats, residual_norms, top_neurons
from viz_ui.views.figures import (attention_grid, attention_heatmap, matrix_heatmap, position_curves, stage_heatmap, topk_bar,
                            value_bar)
from viz_ui.analysis.generation import next_token_view, shown_bars
from viz_ui.analysis.explain import (ffn_formula, ffn_sentence, input_name, logits_formula, mlp_width, norm_formula, norm_sentence,
                            output_sentence, positional_sentence, tokenizer_sentence, unit_label)
from viz_ui.app.layout import (PAGES, position_window, set_shared, shared_number, shared_widget, show_figure, show_link,
                           show_table)
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.gated import logit_lens_gated
from viz_ui.app.state import get_positional_table, get_text_scores
from viz_ui.analysis.head_steps import head_steps, largest_weights
from viz_ui.views.tables import score_table, token_chips_html, token_table, topk_table, vector_table
from viz_ui.analysis.text import plain, plotly_text
from viz_ui.analysis.text_trace import tokenizer_errors, tokenizer_kind

FMT = "{:.4f}"


def tokens(ctx: PageContext) -> None:
    trace = ctx.trace
    if trace.is_encoder_decoder:
        st.markdown("Source (encoder):")
        st.html(token_chips_html(trace.src_labels, trace.src_ids))
        st.markdown("Output so far (decoder input; the next steps follow the decoder):")
        st.html(token_chips_html(trace.labels, trace.ids))
        return
    st.html(token_chips_html(trace.labels, trace.ids))
    show_table(token_table(trace.ids, trace.labels, trace.offsets, trace.text), ctx.app, height=250, hide_index=True)


def embeddings(ctx: PageContext) -> None:
    trace, cfg, n, last = ctx.trace, ctx.cfg, ctx.trace.n_tokens, ctx.trace.n_tokens - 1
    tab_e, tab_p, tab_x = st.tabs(["E (token)", "P (position)", input_name(cfg)])
    with tab_e:
        a, b = position_window(st, trace, cfg.d_model, last)
        show_figure(matrix_heatmap(trace.arrays["hook_embed"][a:b], trace.labels[a:b], "Token embeddings E", offset=a),
                    ctx.app, "walk_E")
    with tab_p:
        if cfg.positional in ("none", "rotary"):
            st.markdown(positional_sentence(cfg) + " P = 0 here" + (": the Embeddings & positions page shows the "
                        "rotation angles." if cfg.positional == "rotary" else "."))
        else:
            table = get_positional_table(ctx.path)
            show_figure(position_curves(table, [0, 1, cfg.d_model // 4, cfg.d_model // 2], n, "P over every position"),
                        ctx.app, "walk_P")
    with tab_x:
        a, b = position_window(st, trace, cfg.d_model, last)
        show_figure(matrix_heatmap(trace.arrays["blocks.0.hook_resid_pre"][a:b], trace.labels[a:b], input_name(cfg),
                                   offset=a), ctx.app,
                    "walk_x")


def one_head(ctx: PageContext) -> None:
    trace, model, cfg, last = ctx.trace, ctx.model, ctx.cfg, ctx.trace.n_tokens - 1
    s = head_steps(model, trace, 0, 0, last)
    st.markdown(f"Layer 0, head 0, with the last token as the query (position {last}, **{plain(trace.labels[last])}**). "
                + (f"√d_k = √{cfg.d_head}: without this division the dot products grow with d_k and softmax would "
                   "put almost all weight on one token. " if cfg.attn_scale is None else
                   "This model does not divide q·k by √d_k (T5); the score also adds a learned relative position "
                   "bias (page 3a shows it). " if cfg.attn_scale == 1 else
                   f"This model divides q·k by {cfg.attn_scale:.4g} instead of √d_k"
                   + (f" and soft-caps the scores at ±{cfg.attn_softcap:g}" if cfg.attn_softcap is not None else "")
                   + " (page 3a shows every step). ")
                + ("The causal mask (−∞) hides later tokens; here the query is the last token, so it sees everything."
                   if cfg.causal else "This model has no causal mask: every token sees every other token."))
    show_table(score_table(trace.labels, s.dots, s.scaled, s.scores, s.weights), ctx.app, height=260, hide_index=True,
               fmt={c: FMT for c in ("q·k", "q·k / √d_k", "exp(score − max)", "weight")})
    order = largest_weights(s, 10)
    show_figure(topk_bar([f"{j} {trace.labels[j]}" for j in order], s.weights[order], "Where the last token looks",
                         x_title="weight"), ctx.app, "walk_head")


def multi_head(ctx: PageContext) -> None:
    trace, model, last = ctx.trace, ctx.model, ctx.trace.n_tokens - 1
    grid, _ = attention_grid(trace.arrays["blocks.0.attn.hook_pattern"][None])
    show_figure(grid, ctx.app, "walk_heads_L0")
    s = head_steps(model, trace, 0, 0, last)
    show_table(vector_table({"head 0's part z·W_O[0]": s.head_out, "attn_out (all heads + b_O)": s.attn_out}, 8),
               ctx.app, fmt=FMT)


def add_norm(ctx: PageContext) -> None:
    trace, cfg, last = ctx.trace, ctx.cfg, ctx.trace.n_tokens - 1
    stats = layernorm_stats(trace, 0, last, cfg.norm_placement)
    st.markdown("Layer 0, last token. " + " ".join(f"**{x.name}** is {x.role}: it reads {x.before_name}, and its output "
                                                   f"is {x.after_name}." for x in stats))
    show_table(vector_table({f"{x.name} input: {x.before_name}" if k == "input" else f"{x.name} output: {x.after_name}":
                             x.before if k == "input" else x.after for x in stats for k in ("input", "output")}, 8),
               ctx.app, fmt=FMT)
    show_table({f"{x.name} ({x.role})": {k: f"{v:.3f}" for k, v in x.summary.items()} for x in stats}, ctx.app)


def feed_forward(ctx: PageContext) -> None:
    trace, cfg, n, last = ctx.trace, ctx.cfg, ctx.trace.n_tokens, ctx.trace.n_tokens - 1
    post, layer0 = trace.arrays["blocks.0.mlp.hook_post"], cfg.for_layer(0)  # layer 0's own MLP (Qwen2-MoE: dense?)
    a, b = position_window(st, trace, mlp_width(layer0), last)
    show_figure(matrix_heatmap(post[a:b], trace.labels[a:b], f"Layer 0 hidden activations [{n} × {mlp_width(layer0)}]",
                               "neuron", "activation", offset=a), ctx.app, "walk_mlp")
    idx, vals = top_neurons(post[last], 10)
    show_figure(value_bar([unit_label(layer0, i) for i in idx], vals, f"Most active for {plotly_text(trace.labels[last])}", "activation"),
                ctx.app, "walk_neurons")


def stack(ctx: PageContext) -> None:
    trace, model, cfg, vocab = ctx.trace, ctx.model, ctx.cfg, ctx.vocab
    norms, names = residual_norms(trace, cfg.n_layers)
    show_figure(stage_heatmap(norms, names, trace.labels, "‖residual stream‖ through the stack", "L2 norm"),
                ctx.app, "walk_stack")
    if not model.has_lm_head:
        return
    lens = logit_lens_gated(ctx.path, trace.text)
    if lens is None:
        return
    ids, probs, rows = lens
    text = [[vocab[i] for i in row] for row in ids]
    show_figure(stage_heatmap(probs, rows, trace.labels, "What each layer would predict (logit lens)", "probability",
                              cell_text=text, zmax=1.0), ctx.app, "walk_lens")


def no_head(ctx: PageContext) -> bool:
    """Say so and return True when the model has no language-model head (no logits to show)."""
    model = ctx.model
    if not model.has_lm_head:
        st.info("This checkpoint has no language-model head: it ends in hidden states, so there are no logits or "
                "probabilities to show. The steps before this one are the whole computation.", icon=":material/block:")
    return not model.has_lm_head


def logits(ctx: PageContext) -> None:
    trace, vocab, last = ctx.trace, ctx.vocab, ctx.trace.n_tokens - 1
    if no_head(ctx):
        return
    row = trace.arrays["hook_logits"][last]
    table = topk_table(row, row, vocab, 10)
    show_figure(value_bar(table["token"].tolist(), table["logit"].to_numpy(), "The 10 largest logits", "logit"),
                ctx.app, "walk_logits")


def softmax(ctx: PageContext) -> None:
    trace, vocab, last = ctx.trace, ctx.vocab, ctx.trace.n_tokens - 1
    if no_head(ctx):
        return
    temperature = shared_number(st.slider, "Temperature T", "temperature", 0.0, 3.0, 1.0, float, step=0.05)
    row = trace.arrays["hook_logits"][last]
    view = next_token_view(row, temperature, 0, 1.0)
    table = topk_table(view.probs, row, vocab, len(shown_bars(view.probs, 10)))  # no bars at exactly 0 (T = 0)
    st.markdown(("T = 0 is greedy: the highest-scoring token is taken (probability 1, entropy 0 bits). " if temperature == 0
                 else f"Entropy: **{view.entropy:.2f} bits**. ")
                + "Lower T sharpens the distribution (T → 0 is greedy: all mass on the largest logit); higher T "
                "flattens it toward uniform, so sampling becomes more surprising.")
    show_figure(topk_bar(table["token"].tolist(), table["probability"].to_numpy(), f"softmax(logits / {temperature:g})"),
                ctx.app, "walk_softmax")


def next_token(ctx: PageContext) -> None:
    trace, cfg, vocab, last = ctx.trace, ctx.cfg, ctx.vocab, ctx.trace.n_tokens - 1
    if not no_head(ctx):
        if not cfg.causal:
            st.markdown(f"This is an encoder: it predicts the token *at* each position (here position {last}, "
                        f"**{plain(trace.labels[last])}**), all positions at once, instead of writing text one token "
                        "after another. Write [MASK] in the text to see it fill in a hidden word (Output page).")
        elif trace.is_encoder_decoder:
            st.markdown("The decoder picks its next token the same way, reading the encoder's output through "
                        "cross-attention at every step; page 5 shows each step with its cross-attention.")
        else:
            row = trace.arrays["hook_logits"][last]
            choice = int(np.argmax(row))
            at_one = next_token_view(row, 1.0, 0, 1.0).probs
            st.markdown(f"Greedy decoding (T = 0) takes the highest-scoring token, **{plain(vocab[choice])}** (p = "
                        f"{at_one[choice]:.1%} at T = 1). Sampling draws from the distribution of the previous step "
                        "instead. Either way the chosen token is appended to the text and the whole pipeline runs again "
                        "for the next one: the Output page does this step by step.")
            try:
                with tokenizer_errors("the tokens cannot be decoded"):  # an uploaded tokenizer may fail or panic
                    seen = ctx.tokenizer.decode(trace.ids.tolist()) if trace.truncated else trace.text  # what it read
                    st.code(seen + "⟨" + ctx.tokenizer.decode([choice]) + "⟩", language=None, wrap_lines=True)
            except ValueError as exc:
                st.error(plain(str(exc)))
    st.markdown("**Where to go from here:** every step has a page of its own, with every layer and head.")
    for path, label, icon in onward(cfg):
        st.page_link(path, label=label, icon=icon)


def onward(cfg) -> list[tuple[str, str, str]]:
    """The pages to go on to from the last step: ``(path, label, icon)`` as in :data:`viz_ui.app.navigation.PAGES`."""
    return [(path, label, icon) for path, label, icon in PAGES if path.startswith("pages/") and path not in (
        "pages/walkthrough.py", "pages/inspector.py") and (cfg.is_encoder_decoder or path != "pages/encoder_decoder.py")]


def walk_steps(ctx: PageContext) -> list[tuple[str, str, str | None, object]]:
    """The walkthrough's steps for this model: ``(title, text, LaTeX formula or None, render(ctx))``."""
    cfg, model, n = ctx.cfg, ctx.model, ctx.trace.n_tokens
    first_token = get_text_scores(ctx.path, ctx.text)["first-token"]
    sink_note = ("" if n < 2 else f" (here up to {float(first_token.max()):.0%} in one head)")
    lm = model.has_lm_head
    return [
        ("Text → tokens", "The tokenizer cuts the text into pieces from a fixed vocabulary. "
         + tokenizer_sentence(tokenizer_kind(ctx.tokenizer)), None, tokens),
        ("Tokens → ids", "Each token is replaced by its integer id, its row number in the vocabulary. From here on the "
         "model only sees these numbers.", None, tokens),
        ("Embeddings + positional encodings", "Each id selects a row of the embedding matrix W_E (d_model numbers). "
         + positional_sentence(cfg),
         r"x_i = W_E[\text{id}_i] + P_i" if cfg.positional in ("learned", "sinusoidal") else r"x_i = W_E[\text{id}_i]",
         embeddings),
        ("One attention head", "Each token makes a query q, a key k and a value v. The query is compared with every key"
         + (" it may see (itself and the tokens before it)" if cfg.causal else " (before and after it: an encoder has no mask)")
         + "; softmax turns the scores into weights that sum to 1; the output is the weighted sum of the values.",
         r"\mathrm{Attention}(Q,K,V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}"
         + (r" + M\right)V" if cfg.causal else r"\right)V"), one_head),
        ("Multi-head attention and W_O", f"{cfg.n_heads} heads do this in parallel, each looking for something else. "
         "Their outputs are concatenated and multiplied by W_O. Heads that put most weight on the first token are "
         f"'attention sinks'{sink_note}: softmax must put its weight somewhere, "
         "and a head with nothing to read parks it there.", r"\mathrm{MultiHead} = \mathrm{Concat}(z_1,\dots,z_h)\,W_O", multi_head),
        ("Add & norm", "The attention output is added to the token's vector (the residual stream), so nothing is lost. "
         f"{norm_sentence(cfg)} ({cfg.norm_placement}-LN: "
         + ("before each sub-layer, so ln1 normalised the stream *before* attention read it, and the stream itself stays "
            "un-normalised)." if cfg.norm_placement == "pre" else "after each addition: ln1 normalises resid_pre + attn_out)."),
         norm_formula(cfg), add_norm),
        ("Feed-forward network", f"Every position then passes through the same two-layer network: {ffn_sentence(cfg.for_layer(0))}; "
         "its output is added to the residual stream too.", ffn_formula(cfg.for_layer(0)), feed_forward),
        ("The stack of layers", f"Attention + feed-forward is one block; this model stacks {cfg.n_layers}."
         + (" The logit lens shows what the model would predict if it stopped after each block." if lm else ""),
         None, stack),
        ("Logits" if lm else "The output", output_sentence(cfg, lm), logits_formula(cfg) if lm else None, logits),
        ("Softmax with temperature", "Softmax turns logits into probabilities. Dividing the logits by a temperature T "
         "before softmax changes how peaked the distribution is.", r"p_i = \frac{e^{z_i/T}}{\sum_j e^{z_j/T}}", softmax),
        ("The next token" if cfg.causal else "The prediction at each position",
         ("One token is chosen from the distribution and appended; then everything runs again." if cfg.causal else
          "Each position gets its own distribution over the vocabulary: the token that fits *there*."),
         None, next_token),
        ]


def pick_step(total: int, titles: list[str]) -> int:
    """The shared ``step`` selector (1 to ``total``)."""
    return shared_widget(st.selectbox, "Step", range(1, total + 1), key="step", default=1,
                         valid=lambda v: 1 <= v <= total, cast=int,
                         format_func=lambda i: f"{i} / {total} · {titles[i - 1]}")


def show_step(ctx: PageContext, step: int, steps: list) -> None:
    """The step's title, text, formula and view, and the Previous and Next buttons."""
    title, text, formula, render = steps[step - 1]
    st.header(f"{step} · {title}", anchor="walk-step")
    st.markdown(text)
    if formula:
        st.latex(formula)
    render(ctx)
    back, forward, _ = st.columns([1, 1, 4])
    back.button("Previous", icon=":material/arrow_back:", disabled=step == 1, on_click=set_shared, args=("step", step - 1))
    forward.button("Next", icon=":material/arrow_forward:", type="primary", disabled=step == len(steps),
                   on_click=set_shared, args=("step", step + 1))
    # Streamlit keeps the scroll position across reruns, so "Next" would leave the new step scrolled to the bottom.
    # This script is a new element whenever the step changes (its text names the step) and then scrolls the page's
    # main area to the top; reruns within a step (e.g. the temperature slider) keep the element and the scroll position.
    st.html(f"<script>/* step {step} */ for (const w of [window, window.parent]) {{ w.scrollTo(0, 0); "
            "w.document.querySelector('[data-testid=stMain]')?.scrollTo(0, 0); }</script>",
            unsafe_allow_javascript=True)


ctx = open_page("Guided walkthrough",
                "From your text to the model's output, one step at a time, with the numbers this model computes now.")
steps = walk_steps(ctx)
show_step(ctx, pick_step(len(steps), [title for title, *_ in steps]), steps)
show_link(ctx.app)  # steps without a figure still refresh the link (with the step number)
