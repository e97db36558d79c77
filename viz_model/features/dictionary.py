"""Sparse dictionaries: sparse autoencoders (SAEs) and transcoders, as SAELens defines them.

A dictionary reads an activation ``x`` ``[..., d_in]`` at one hook and writes ``d_sae`` non-negative feature
activations ``f = encode(x)``; ``decode(f)`` ``[..., d_out]`` is a sum of decoder rows. An **SAE** reconstructs the
hook it reads (``d_out == d_in``, e.g. ``blocks.{l}.hook_resid_post``); a **transcoder** reads the MLP's input
``blocks.{l}.ln2.hook_normalized`` and predicts the MLP's output ``blocks.{l}.hook_mlp_out`` (``hook_name_out``).

Formulas (SAELens, ``sae_lens/saes/standard_sae.py``, ``jumprelu_sae.py``, ``topk_sae.py``, ``transcoder.py``;
the shared input step is ``SAE.process_sae_in`` in ``sae_lens/saes/sae.py``)::

    x'         = x - b_dec            if apply_b_dec_to_input (SAEs only: a transcoder's b_dec lives in d_out)
    hidden_pre = x' @ W_enc + b_enc                                     [..., d_sae]
    standard:  f = relu(hidden_pre)
    jumprelu:  f = relu(hidden_pre) * (hidden_pre > threshold)          (Rajamanoharan et al. 2024)
    topk:      f = the k largest hidden_pre kept (then relu), the rest 0 (Gao et al. 2024, "Scaling and
               evaluating sparse autoencoders"; ties broken as torch.topk breaks them)
    decode:    x_hat = f @ W_dec + b_dec                                [..., d_out]

Everything is torch only (no Streamlit, no Plotly).
"""

from __future__ import annotations

import re

import torch
from torch import nn

ARCHITECTURES = ("standard", "jumprelu", "topk")
TRANSCODER_IN = re.compile(r"^blocks\.(\d+)\.ln2\.hook_normalized$")


class SparseDictionary(nn.Module):
    """An SAE or transcoder with SAELens's parameters and formulas (see the module docstring).

    Parameters (float32 unless built otherwise): ``W_enc`` [d_in, d_sae], ``b_enc`` [d_sae], ``W_dec``
    [d_sae, d_out], ``b_dec`` [d_out], and for ``architecture == "jumprelu"`` ``threshold`` [d_sae].

    Args:
        d_in, d_sae: input width (the hook's last dimension) and number of features.
        hook_name: the hook it reads (TransformerLens name, e.g. ``blocks.3.hook_resid_post``).
        architecture: ``"standard"`` (ReLU), ``"jumprelu"`` or ``"topk"``.
        k: features kept per position (``topk`` only), 1 <= k <= d_sae.
        hook_name_out, d_out: a transcoder's output hook and width; None for an SAE (``d_out = d_in``).
        apply_b_dec_to_input: subtract ``b_dec`` from the input before encoding (SAEs; ignored by transcoders,
            as in SAELens, whose ``Transcoder.process_sae_in`` skips it).

    Raises:
        ValueError: an unknown architecture, widths below 1, or a missing / out-of-range ``k``.
    """

    def __init__(self, d_in: int, d_sae: int, hook_name: str, architecture: str = "topk", k: int | None = None,
                 hook_name_out: str | None = None, d_out: int | None = None, apply_b_dec_to_input: bool = True,
                 dtype: torch.dtype = torch.float32, empty: bool = False) -> None:
        super().__init__()
        if architecture not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {architecture!r} (one of: {', '.join(ARCHITECTURES)})")
        d_out = d_in if d_out is None else d_out
        if min(d_in, d_sae, d_out) < 1:
            raise ValueError(f"d_in, d_sae and d_out must be >= 1, got {d_in}, {d_sae}, {d_out}")
        if architecture == "topk" and (k is None or not 1 <= k <= d_sae):
            raise ValueError(f"a topk dictionary needs 1 <= k <= d_sae ({d_sae}), got k={k}")
        if hook_name_out is None and d_out != d_in:
            raise ValueError(f"an SAE reconstructs its input: d_out ({d_out}) must equal d_in ({d_in})")
        self.d_in, self.d_sae, self.d_out = int(d_in), int(d_sae), int(d_out)
        self.hook_name, self.hook_name_out = hook_name, hook_name_out
        self.architecture, self.k = architecture, (int(k) if architecture == "topk" else None)
        self.apply_b_dec_to_input = bool(apply_b_dec_to_input)
        make = torch.empty if empty else torch.zeros
        self.W_enc = nn.Parameter(make(d_in, d_sae, dtype=dtype))
        self.b_enc = nn.Parameter(make(d_sae, dtype=dtype))
        self.W_dec = nn.Parameter(make(d_sae, d_out, dtype=dtype))
        self.b_dec = nn.Parameter(make(d_out, dtype=dtype))
        self.threshold = nn.Parameter(make(d_sae, dtype=dtype)) if architecture == "jumprelu" else None

    @property
    def kind(self) -> str:
        """``"transcoder"`` when it writes another hook than it reads, else ``"sae"``."""
        return "sae" if self.hook_name_out is None else "transcoder"

    @property
    def out_hook(self) -> str:
        """The hook its decoder writes: ``hook_name_out`` for a transcoder, ``hook_name`` for an SAE."""
        return self.hook_name_out or self.hook_name

    def extra_repr(self) -> str:
        k = f", k={self.k}" if self.k else ""
        out = f" -> {self.hook_name_out}" if self.hook_name_out else ""
        return f"{self.architecture}{k}, {self.hook_name}{out}, d_in={self.d_in}, d_sae={self.d_sae}, d_out={self.d_out}"

    def hidden_pre(self, x: torch.Tensor) -> torch.Tensor:
        """The pre-activations ``x' @ W_enc + b_enc`` ``[..., d_sae]`` for ``x`` ``[..., d_in]`` (computed in the
        dictionary's dtype, on its device: ``x`` from a model on another device is moved here)."""
        x = x.to(device=self.W_enc.device, dtype=self.W_enc.dtype)
        if self.apply_b_dec_to_input and self.kind == "sae":
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def activate(self, hidden_pre: torch.Tensor) -> torch.Tensor:
        """The activation function of ``architecture`` applied to ``hidden_pre`` ``[..., d_sae]``."""
        if self.architecture == "standard":
            return torch.relu(hidden_pre)
        if self.architecture == "jumprelu":
            return torch.relu(hidden_pre) * (hidden_pre > self.threshold).to(hidden_pre.dtype)
        top = hidden_pre.topk(self.k, dim=-1)
        return torch.zeros_like(hidden_pre).scatter(-1, top.indices, torch.relu(top.values))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Feature activations ``[..., d_sae]`` (>= 0) for activations ``x`` ``[..., d_in]``."""
        return self.activate(self.hidden_pre(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """The reconstruction (SAE) or prediction (transcoder) ``f @ W_dec + b_dec`` ``[..., d_out]`` for feature
        activations ``f`` ``[..., d_sae]`` (on the dictionary's device)."""
        return f.to(device=self.W_dec.device, dtype=self.W_dec.dtype) @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``decode(encode(x))`` ``[..., d_out]``."""
        return self.decode(self.encode(x))


def transcoder_out_hook(hook_name: str) -> str:
    """The hook a transcoder reading ``hook_name`` predicts: ``blocks.{l}.ln2.hook_normalized`` ->
    ``blocks.{l}.hook_mlp_out``.

    Raises:
        ValueError: for any other hook name.
    """
    m = TRANSCODER_IN.match(hook_name)
    if not m:
        raise ValueError(f"a transcoder reads blocks.<layer>.ln2.hook_normalized, not {hook_name!r}")
    return f"blocks.{m.group(1)}.hook_mlp_out"
