"""Export as code: the Python that reproduces the Steering & feature ablation page's numbers with the project's
public API (``viz_model.load_model``, ``viz_model.features.load_dictionary``,
``viz_model.interventions.steering``), from the same checkpoint, text and dictionary, and prints them (no
Streamlit). Texts become ids as in the app (see :mod:`viz_ui.views.code_interventions`). A dictionary trained or uploaded
in the session lives in a temporary folder of the server: the script then names it ``PATH/TO/...`` (download the
set as a .zip to get it)."""

from __future__ import annotations

from pathlib import Path

from viz_ui.views.code_interventions import _ids, _load
from viz_ui.analysis.interventions import Prompt

ROOT = Path(__file__).resolve().parents[2]
SESSION_NOTE = "a dictionary trained or uploaded in the app: download its set (.zip) and give its folder"


def dictionary_path(folder: str) -> str:
    """How the script names a dictionary folder: relative to the repository for a shipped one."""
    try:
        return str(Path(folder).resolve().relative_to(ROOT))
    except ValueError:
        return f"PATH/TO/{Path(folder).name}"


def _header(what: str, path: str, load_args: str = "") -> list[str]:
    return [f'"""{what} (Inside a Transformer, page "Steering & feature ablation"): the numbers the page shows."""',
            "import torch", "", "from viz_model import load_model",
            "from viz_model.features import load_dictionary",
            "from viz_model.interventions import steering", "", *_load(path, load_args),
            "torch.set_printoptions(precision=4, linewidth=160, sci_mode=False)"]


def _top_lines(before: str, after: str, name: str, has_tokenizer: bool) -> list[str]:
    label = "tokenizer.id_to_token(i)" if has_tokenizer else "i"
    return [f"p0, p1 = torch.softmax({before}.float(), -1), torch.softmax({after}.float(), -1)",
            "shown = p0.topk(8).indices.tolist()",
            "shown += [i for i in p1.topk(8).indices.tolist() if i not in shown]",
            f"print(f\"{{'token':>14}} {{'id':>6}} {{'p intact':>9}} {{'p {name}':>9}} {{'Δp':>9}}\")",
            "for i in shown:",
            f"    print(f\"{{{label}!r:>14}} {{i:6d}} {{p0[i]:9.4f}} {{p1[i]:9.4f}} {{p1[i] - p0[i]:+9.4f}}\")"]


def steering_code(path: str, text: str, prompt: Prompt, has_tokenizer: bool, cut: bool, source: dict,
                  alpha: float, unit: float, last_only: bool, pos: int, causal: bool, n_new: int = 20,
                  load_args: str = "") -> str:
    """The steering view: ``direction`` at ``hook``, the output at ``pos`` intact vs steered (``p0``, ``p1``
    ``[d_vocab]``) and, for a decoder, the greedy continuations ``intact_ids`` / ``steered_ids``.

    ``source``: ``{"kind": "feature", "folder", "feature"}`` or ``{"kind": "contrastive", "text_a", "text_b",
    "hook", "prompt_a", "prompt_b", "cut_a", "cut_b"}``. ``load_args``: ``load_model``'s keyword arguments
    (:func:`viz_ui.views.code_interventions.load_arguments`)."""
    lines = _header("Steering", path, load_args)
    lines += ["", f"text = {text!r}", *_ids("tokens", "text", prompt, has_tokenizer, cut, "kw")]
    if source["kind"] == "feature":
        folder = dictionary_path(source["folder"])
        note = f"  # {SESSION_NOTE}" if folder.startswith("PATH/TO/") else ""
        lines += [f"dictionary = load_dictionary({folder!r}){note}",
                  f"feature = {source['feature']}",
                  "hook = dictionary.out_hook  # the hook its decoder writes",
                  "direction = dictionary.W_dec[feature].float()  # the feature's decoder row [d_model]"]
    else:
        lines += [f"text_a, text_b = {source['text_a']!r}, {source['text_b']!r}",
                  *_ids("tokens_a", "text_a", source["prompt_a"], has_tokenizer, source["cut_a"], "kw_a")[:1],
                  *_ids("tokens_b", "text_b", source["prompt_b"], has_tokenizer, source["cut_b"], "kw_b")[:1],
                  f"hook = {source['hook']!r}",
                  "# mean activation over text A's positions minus that over text B's",
                  "direction = steering.contrastive_direction(model, tokens_a, tokens_b, hook)"]
    positions = "[tokens.shape[1] - 1]  # the text's last position only" if last_only else \
        "None  # every position, the generated ones too"
    lines += [f"alpha = {alpha!r} * {unit!r}  # the slider's value times its unit",
              f"positions = {positions}", f"pos = {pos}  # the position whose output is shown",
              "with torch.no_grad():",
              "    intact = model(tokens)[0, pos].cpu()  # on the CPU whatever the model's device",
              "steered = steering.steer(model, tokens, hook, direction, alpha, positions)[0, pos].cpu()",
              *_top_lines("intact", "steered", "steered", has_tokenizer)]
    if causal:
        dec = (lambda v: f"tokenizer.decode({v})") if has_tokenizer else (lambda v: v)
        lines += ["", f"# {n_new} greedy tokens after the text (KV cache), intact and steered",
                  "intact_ids, steered_ids = steering.steered_continuations(model, tokens[0].tolist(), hook, direction,",
                  f"                                                         alpha, {n_new}, positions)",
                  f"print('intact :', repr({dec('intact_ids')}))",
                  f"print('steered:', repr({dec('steered_ids')}))"]
    return "\n".join(lines) + "\n"


def ablation_code(path: str, text: str, prompt: Prompt, has_tokenizer: bool, cut: bool, folder: str,
                  features: list[int], pos: int, load_args: str = "") -> str:
    """The feature-ablation view: the output at ``pos`` intact vs ablated (``p0``, ``p1``) and ``kl`` ``[pos]``,
    KL(intact ‖ ablated) in nats at every position."""
    shown = dictionary_path(folder)
    note = f"  # {SESSION_NOTE}" if shown.startswith("PATH/TO/") else ""
    lines = _header("Feature ablation", path, load_args)
    lines += ["", f"text = {text!r}", *_ids("tokens", "text", prompt, has_tokenizer, cut, "kw"),
              f"dictionary = load_dictionary({shown!r}){note}",
              f"features = {list(features)}  # switched off at every position (reconstruction without them + error)",
              f"pos = {pos}  # the position whose output is shown",
              "with torch.no_grad():",
              "    intact = model(tokens)[0].double().cpu()  # on the CPU whatever the model's device",
              "ablated = steering.ablate_features(model, tokens, dictionary, features)[0].double().cpu()",
              *_top_lines("intact[pos]", "ablated[pos]", "ablated", has_tokenizer),
              "logp, logq = torch.log_softmax(intact, -1), torch.log_softmax(ablated, -1)",
              "kl = (logp.exp() * (logp - logq)).sum(-1)  # KL(intact || ablated), nats, at every position",
              "print('KL at every position:', kl)"]
    return "\n".join(lines) + "\n"
