"""Export as code for the Features page: the Python that reproduces its numbers with the project's public API
(``viz_model.load_model`` and ``viz_model.features``), from the same checkpoint, text and dictionary, printing what
the page draws (no Streamlit). ``tests/test_features_page.py`` runs the string and compares its output."""

from __future__ import annotations

from pathlib import Path

from viz_ui.views.code_interventions import _load

ROOT = Path(__file__).resolve().parents[2]


def _folder(folder: str) -> str:
    """A shipped dictionary's folder relative to the project (the script runs from its root), else as is."""
    try:
        return str(Path(folder).resolve().relative_to(ROOT))
    except ValueError:
        return folder


def features_code(model_path: str, text: str, folder: str, feature: int, n_ids: int, position: int,
                  load_args: str = "") -> str:
    """A script printing, for ``text`` cut to ``n_ids`` tokens as the app runs it: each token's strongest feature of
    the dictionary in ``folder``, its FVU on the text, feature ``feature``'s top promoted and suppressed tokens and
    the heads writing most to it at ``position``."""
    load, = _load(_folder(model_path), load_args)  # load_args: code_interventions.load_arguments
    return "\n".join([
        '"""Features of a text under a sparse dictionary, as the Features page shows them."""',
        "import torch",
        "from viz_model import load_model",
        "from viz_model.features import (feature_acts, head_contributions, load_dictionary, promoted_tokens,",
        "                                reconstruction, top_features)",
        "",
        load,
        f"dictionary = load_dictionary({_folder(folder)!r})",
        f"text = {text!r}",
        f"tokens = torch.tensor(tokenizer.encode(text).ids[:{n_ids}])  # no BOS token, cut as the app cuts it",
        "acts = feature_acts(model, tokens, dictionary)  # [pos, d_sae]",
        "ids, values = top_features(acts, 1)",
        "for pos, (i, v) in enumerate(zip(ids[:, 0].tolist(), values[:, 0].tolist())):",
        "    print(pos, repr(tokenizer.id_to_token(int(tokens[pos]))), f'F{i}', round(v, 4))",
        "print('FVU on this text:', round(reconstruction(model, tokens, dictionary).fvu, 4))",
        f"feature = {feature}",
        "(up_ids, up), (down_ids, down) = promoted_tokens(model, dictionary, feature, n=10)",
        "print('promotes:', [(tokenizer.id_to_token(int(i)), round(float(v), 3)) for i, v in zip(up_ids, up)])",
        "print('suppresses:', [(tokenizer.id_to_token(int(i)), round(float(v), 3)) for i, v in zip(down_ids, down)])",
        f"heads = head_contributions(model, tokens, dictionary, feature, position={position})  # [n_layers, n_heads]",
        "top = heads.flatten().abs().topk(5).indices",
        "print('heads writing most:', [(f'L{int(i) // heads.shape[1]}H{int(i) % heads.shape[1]}',",
        "                              round(float(heads.flatten()[i]), 4)) for i in top])",
        ""])
