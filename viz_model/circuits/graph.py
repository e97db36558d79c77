"""The attribution graph: its nodes, its dense adjacency matrix, and where each kind of node sits.

Field names, shapes and node order follow circuit-tracer's ``Graph`` (``circuit_tracer/graph.py``), so that a
practitioner's habits and code carry over:

- nodes are ordered ``[selected features, error nodes, token nodes, logit nodes]``; error node ``(layer, pos)`` has
  index ``n_features + layer * n_pos + pos``, token node ``pos`` index ``n_features + n_layers * n_pos + pos``, and the
  logit nodes come last, most probable first;
- ``adjacency[target, source]`` is the direct effect of ``source`` on ``target`` (row = target, column = source).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Graph:
    """An attribution graph (see :func:`viz_model.circuits.attribute`).

    Attributes:
        adjacency: ``[n_nodes, n_nodes]`` float32, row = target, column = source.
        active_features: ``[n_active, 3]`` int64 ``(layer, pos, feature index)``, sorted.
        selected_features: ``[n_features]`` int64 indices into ``active_features``: the feature nodes, in order.
        activation_values: ``[n_active]`` float32 activations of the active features.
        logit_tokens: ``[n_logits]`` int64 vocabulary ids of the logit nodes; ``logit_probabilities`` ``[n_logits]``
            their probabilities at the last position (the logit nodes' weights in influence).
        input_tokens: ``[n_pos]`` int64 ids of the prompt.
        n_layers: the model's number of blocks (one error node per block and position).
        zeroed_positions: positions whose features and errors are not nodes (circuit-tracer's ``zero_positions``:
            the first position when it holds a beginning-of-sequence token).
        scan: a name for the transcoders used (Neuronpedia's ``scan``).
        message: one line when the graph was capped (``max_feature_nodes``) to stay within memory; else "".
    """

    adjacency: torch.Tensor
    active_features: torch.Tensor
    selected_features: torch.Tensor
    activation_values: torch.Tensor
    logit_tokens: torch.Tensor
    logit_probabilities: torch.Tensor
    input_tokens: torch.Tensor
    n_layers: int
    zeroed_positions: tuple[int, ...] = ()
    scan: str = ""
    message: str = ""
    # what edge_heads and interventions need: the model, transcoders and frozen state; never serialised
    context: object | None = field(default=None, repr=False, compare=False)

    @property
    def n_pos(self) -> int:
        """Number of prompt positions."""
        return int(self.input_tokens.shape[0])

    @property
    def n_features(self) -> int:
        """Number of feature nodes (``len(selected_features)``)."""
        return int(self.selected_features.shape[0])

    @property
    def n_logits(self) -> int:
        """Number of logit nodes."""
        return int(self.logit_tokens.shape[0])

    @property
    def n_nodes(self) -> int:
        """Number of nodes: features + ``n_layers * n_pos`` errors + ``n_pos`` tokens + logits."""
        return self.n_features + (self.n_layers + 1) * self.n_pos + self.n_logits

    @property
    def error_start(self) -> int:
        """Index of the first error node."""
        return self.n_features

    @property
    def token_start(self) -> int:
        """Index of the first token node."""
        return self.n_features + self.n_layers * self.n_pos

    @property
    def logit_start(self) -> int:
        """Index of the first logit node."""
        return self.token_start + self.n_pos

    def logit_weights(self) -> torch.Tensor:
        """``[n_nodes]`` float32: each logit node's probability, 0 elsewhere (the weights of influence)."""
        w = torch.zeros(self.n_nodes, dtype=torch.float32)
        w[self.logit_start:] = self.logit_probabilities.float()
        return w

    def node_kind(self, index: int) -> str:
        """``"feature"``, ``"error"``, ``"token"`` or ``"logit"``.

        Raises:
            IndexError: outside ``[0, n_nodes)``.
        """
        if not 0 <= index < self.n_nodes:
            raise IndexError(f"node {index} is outside [0, {self.n_nodes})")
        if index < self.error_start:
            return "feature"
        if index < self.token_start:
            return "error"
        return "token" if index < self.logit_start else "logit"

    def node_location(self, index: int) -> tuple[int, int]:
        """``(layer, pos)`` of a node: its block for features and errors, ``-1`` for tokens (the embedding) and
        ``n_layers`` for logits (after the last block); logits sit at the last position."""
        kind = self.node_kind(index)
        if kind == "feature":
            layer, pos, _ = self.active_features[self.selected_features[index]].tolist()
            return int(layer), int(pos)
        if kind == "error":
            return divmod(index - self.error_start, self.n_pos)
        if kind == "token":
            return -1, index - self.token_start
        return self.n_layers, self.n_pos - 1

    def feature_of(self, index: int) -> tuple[int, int, int, float]:
        """``(layer, pos, feature index, activation)`` of feature node ``index``.

        Raises:
            ValueError: when the node is not a feature.
        """
        if self.node_kind(index) != "feature":
            raise ValueError(f"node {index} is a {self.node_kind(index)} node, not a feature")
        active = int(self.selected_features[index])
        layer, pos, feat = self.active_features[active].tolist()
        return int(layer), int(pos), int(feat), float(self.activation_values[active])

    def feature_node(self, layer: int, pos: int, feature: int) -> int | None:
        """The node index of feature ``feature`` of ``layer``'s transcoder at ``pos``, or None when it is not a node."""
        hit = ((self.active_features[self.selected_features] == torch.tensor([layer, pos, feature])).all(-1)
               .nonzero().flatten())
        return int(hit[0]) if len(hit) else None
