"""Export as code: the Python that reproduces each view of the interventions page with this project's public API
(``from viz_model import load_model, ablation, patching, attribution``), from the same checkpoint and texts, and
prints the numbers the page draws (no Streamlit). ``tests/test_intervention_views.py`` runs each string and compares.

Texts become ids as in the app (:func:`viz_ui.analysis.text_trace.run_trace`): the tokenizer's ids with no BOS token added, cut to
the first ``n`` tokens when the app cut them; an encoder-decoder's decoder reads the start token and the greedy
output of the clean source (written out as ids), with the source as ``src_tokens``.
"""

from __future__ import annotations

import json

from viz_ui.analysis.interventions import N_GENERATE, Prompt

UPLOAD_NOTE = "the file you uploaded (an upload lives in the browser session only)"


def load_arguments(dtype: str, device_type: str) -> str:
    """The keyword arguments an exported script passes to ``load_model`` so that it computes as the server does:
    the server's ``--dtype`` unless it is the default float32 (``dtype="auto"`` keeps a bfloat16 checkpoint's own
    numbers), and ``device="auto"`` for a model on a GPU (the script then runs on a GPU where there is one, else on
    the CPU). ``""`` for the defaults (CPU, float32).

    >>> load_arguments("auto", "cuda")
    'dtype="auto", device="auto"'
    """
    args = [] if dtype == "float32" else [f"dtype={json.dumps(dtype)}"]
    return ", ".join(args + (['device="auto"'] if device_type == "cuda" else []))


def _load(path: str, load_args: str = "") -> list[str]:
    extra = f", {load_args}" if load_args else ""
    if path.startswith("upload:"):
        return [f'model, tokenizer = load_model("PATH/TO/YOUR/CHECKPOINT"{extra})  # {UPLOAD_NOTE}']
    return [f"model, tokenizer = load_model({path!r}{extra})"]


def _ids(var: str, text_var: str, prompt: Prompt, has_tokenizer: bool, cut: bool, kw: str) -> list[str]:
    """Lines that set ``var`` (``[1, pos]``) and ``kw`` (forward keywords) for one text, as the app runs it."""
    if prompt.src_ids is not None:  # encoder-decoder: the text is the source
        src = (f"torch.tensor([tokenizer.encode({text_var}).ids[:{len(prompt.src_ids)}]])" if has_tokenizer and cut else
               f"torch.tensor([tokenizer.encode({text_var}).ids])" if has_tokenizer else
               f"torch.tensor([{list(prompt.src_ids)}])")
        return [f"{kw} = {{'src_tokens': {src}}}  # the source, read by the encoder",
                f"{var} = torch.tensor([{list(prompt.ids)}])  # the decoder's input, as the app shows it: the start "
                "token and the model's greedy output for the clean source"]
    if not has_tokenizer:
        return [f"{var} = torch.tensor([{list(prompt.ids)}])  # the typed token ids (this checkpoint has no tokenizer)",
                f"{kw} = {{}}"]
    cut_text = f"[:{len(prompt.ids)}]" if cut else ""
    note = f"  # cut to the first {len(prompt.ids)} tokens, as the app" if cut else "  # no BOS token, as the app"
    return [f"{var} = torch.tensor([tokenizer.encode({text_var}).ids{cut_text}]){note}", f"{kw} = {{}}"]


def _header(what: str, modules: str, path: str, load_args: str = "") -> list[str]:
    return [f'"""{what} (Inside a Transformer, page "Cause and effect"): the numbers the page shows."""',
            "import torch", "", f"from viz_model import {modules}", "", *_load(path, load_args),
            "torch.set_printoptions(precision=4, linewidth=160, sci_mode=False)"]


def _decode(var: str, has_tokenizer: bool) -> str:
    return f"tokenizer.decode({var})" if has_tokenizer else var


def ablation_code(path: str, text: str, prompt: Prompt, has_tokenizer: bool, cut: bool, heads: list[tuple[int, int]],
                  kind: str, mean_text: str, mean_prompt: Prompt | None, mean_cut: bool, pos: int, token_id: int,
                  causal: bool, load_args: str = "") -> str:
    """The ablation view: output probabilities at ``pos`` intact vs ablated (``p_intact``, ``p_ablated``
    ``[d_vocab]``), the per-head effect map ``effects`` ``[n_layers, n_heads]`` (Δ log p of ``token_id``, nats)
    and, for causal models, the greedy generations ``intact_ids`` / ``ablated_ids``."""
    lines = _header("Head ablation", "ablation, generate, load_model", path, load_args)
    lines += ["", f"text = {text!r}", *_ids("tokens", "text", prompt, has_tokenizer, cut, "kw"),
              f"heads = {[tuple(h) for h in heads]}  # (layer, head) switched off at blocks.{{layer}}.attn.hook_z",
              f"kind = {kind!r}", f"pos = {pos}  # the position whose output is shown", "means = None"]
    if kind == "mean":
        if mean_text and mean_prompt is not None:
            lines += [f"reference = {mean_text!r}",
                      *_ids("ref_tokens", "reference", mean_prompt, has_tokenizer, mean_cut, "ref_kw"),
                      "means = ablation.head_means(model, ref_tokens, **ref_kw)  # [n_layers, n_heads, d_head]"]
        else:
            lines += ["means = ablation.head_means(model, tokens, **kw)  # mean over this text's positions"]
    lines += ["",
              "with torch.no_grad():",
              "    p_intact = torch.softmax(model(tokens, **kw)[0, pos].float(), dim=-1)",
              "    ablated = ablation.ablate_heads(model, tokens, heads, kind, means, **kw)",
              "    p_ablated = torch.softmax(ablated[0, pos].float(), dim=-1)",
              "shown = p_intact.topk(8).indices.tolist()",
              "shown += [i for i in p_ablated.topk(8).indices.tolist() if i not in shown]",
              "print(f\"{'token':>14} {'id':>6} {'p intact':>9} {'p ablated':>9} {'Δp':>9}\")",
              "for i in shown:",
              "    print(f\"{tokenizer.id_to_token(i)!r:>14} {i:6d} {p_intact[i]:9.4f} {p_ablated[i]:9.4f} "
              "{p_ablated[i] - p_intact[i]:+9.4f}\")" if has_tokenizer else
              "    print(f\"{i!r:>14} {i:6d} {p_intact[i]:9.4f} {p_ablated[i]:9.4f} "
              "{p_ablated[i] - p_intact[i]:+9.4f}\")",
              "",
              f"token_id = {token_id}  # the token whose log-probability each head's ablation changes",
              "effects = ablation.head_ablation_effects(model, tokens, token_id, pos, kind, means, base=heads, **kw)",
              "print('Δ log p(token) in nats when each head is ablated too (rows = layers, columns = heads):')",
              "print(effects)"]
    if causal:
        if prompt.src_ids is not None:
            gen = ("[s.token_id for s in generate(model, [model.cfg.decoder_start_id], model.cfg.n_ctx - 1, 0.0, "
                   "src_ids=kw['src_tokens'][0].tolist())]")
            what = "the whole output, greedy"
        else:
            gen = f"[s.token_id for s in generate(model, tokens[0].tolist(), {N_GENERATE}, 0.0)]"
            what = f"{N_GENERATE} greedy tokens after the text"
        lines += ["", f"# {what} (KV cache), intact and under the ablation hooks",
                  f"intact_ids = {gen}",
                  "with model.hooks(ablation.head_ablation_hooks(model, heads, kind, means)):",
                  f"    ablated_ids = {gen}",
                  f"print('intact :', repr({_decode('intact_ids', has_tokenizer)}))",
                  f"print('ablated:', repr({_decode('ablated_ids', has_tokenizer)}))"]
    return "\n".join(lines) + "\n"


def patching_code(path: str, clean_text: str, corrupted_text: str, clean: Prompt, corrupted: Prompt,
                  has_tokenizer: bool, clean_cut: bool, corrupted_cut: bool, kind: str, answer: int, wrong: int,
                  pos: int, cell: tuple[str, int, int] | None, load_args: str = "") -> str:
    """The patching view: ``results`` (raw) and ``normalised`` ``{site: [n_layers, pos] or [n_layers, n_heads]}``,
    ``clean_value``, ``corrupted_value`` and, for the chosen cell, ``moved`` (the patch lens)."""
    lines = _header("Activation patching", "load_model, patching", path, load_args)
    lines += ["", f"clean_text = {clean_text!r}", f"corrupted_text = {corrupted_text!r}",
              *_ids("clean_tokens", "clean_text", clean, has_tokenizer, clean_cut, "clean_kw")]
    if clean.src_ids is not None:
        lines += [*_ids("corrupted_tokens", "corrupted_text", corrupted, has_tokenizer, corrupted_cut, "kw")[:1],
                  "corrupted_tokens = clean_tokens  # the decoder reads the clean output in both runs"]
    else:
        lines += _ids("corrupted_tokens", "corrupted_text", corrupted, has_tokenizer, corrupted_cut, "kw")
    lines += [f"pos = {pos}  # the position whose prediction the metric reads"]
    if kind == "prob":
        lines += [f"answer = {answer}",
                  "metric = patching.prob_metric(answer, pos)  # the clean answer's probability"]
    else:
        lines += [f"answer, wrong = {answer}, {wrong}",
                  "metric = patching.logit_diff_metric(answer, wrong, pos)  # logits[answer] - logits[wrong]"]
    lines += ["", "clean_logits, clean_cache = model.run_with_cache(clean_tokens, **clean_kw)",
              "with torch.no_grad():",
              "    clean_value = float(metric(clean_logits))",
              "    corrupted_value = float(metric(model(corrupted_tokens, **kw)))",
              "print(f'metric: clean {clean_value:.4f}, corrupted {corrupted_value:.4f}')",
              "results = {",
              "    'resid_pre': patching.get_act_patch_resid_pre(model, corrupted_tokens, clean_cache, metric, **kw),",
              "    'attn_out': patching.get_act_patch_attn_out(model, corrupted_tokens, clean_cache, metric, **kw),",
              "    'mlp_out': patching.get_act_patch_mlp_out(model, corrupted_tokens, clean_cache, metric, **kw),",
              "    'head': patching.get_act_patch_attn_head_out_all_pos(model, corrupted_tokens, clean_cache, metric,",
              "                                                         **kw),",
              "}",
              "# 1 = the clean value fully restored, 0 = no effect (raises ValueError when the two runs agree)",
              "normalised = {site: patching.normalise(r, clean_value, corrupted_value) for site, r in results.items()}",
              "for site, values in normalised.items():",
              "    print(site, '(rows = layers; columns = positions, or heads for head)')",
              "    print(values)"]
    if cell is not None:
        site, layer, index = cell
        lines += ["", "# the patch lens of one cell: how much each later component's output moved",
                  f"moved = patching.patch_downstream(model, corrupted_tokens, clean_cache, {site!r}, {layer},",
                  f"                                   {index}, **kw)",
                  "for name, value in sorted(moved.items(), key=lambda kv: -kv[1])[:15]:",
                  "    print(f'{name:>10} {value:.4f}')"]
    return "\n".join(lines) + "\n"


def attribution_code(path: str, text: str, prompt: Prompt, has_tokenizer: bool, cut: bool, token_id: int,
                     pos: int, load_args: str = "") -> str:
    """The attribution view: ``dla`` ``{component: logit units}`` and the model's own ``logit``. ``load_args``
    (every exporter here): ``load_model``'s keyword arguments, :func:`load_arguments`."""
    lines = _header("Direct logit attribution", "attribution, load_model", path, load_args)
    lines += ["", f"text = {text!r}", *_ids("tokens", "text", prompt, has_tokenizer, cut, "kw"),
              f"token_id, pos = {token_id}, {pos}  # the output token whose logit is split, at this position",
              "logits, cache = model.run_with_cache(tokens, names_filter=attribution.attribution_hooks(model), **kw)",
              "dla = attribution.direct_logit_attribution(model, cache, token_id, pos)  # in the forward order",
              "logit = float(logits[0, pos, token_id])",
              "for name, value in dla.items():",
              "    print(f'{name:>16} {value:+.4f}')",
              "print(f'sum of the contributions {sum(dla.values()):.4f}, the model\\'s logit {logit:.4f}')"]
    return "\n".join(lines) + "\n"
