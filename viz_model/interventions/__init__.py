"""Causal interventions beside the hooks, with TransformerLens' names and semantics: head ablation
(:mod:`.ablation`), activation patching (:mod:`.patching`, as ``transformer_lens.patching``), direct logit
attribution (:mod:`.attribution`) and QK attribution (:mod:`.qk`, reached as ``attribution.qk_attribution``), both
built on the residual stream's sources (:mod:`.residual`), and steering and feature ablation (:mod:`.steering`). All
are built on ``model.run_with_hooks`` and ``model.run_with_cache``.

``from viz_model import patching, attribution, ablation`` gives the first three modules.
"""

from viz_model.interventions import ablation, attribution, patching, steering

__all__ = ["ablation", "attribution", "patching", "steering"]
