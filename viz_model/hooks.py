"""Hook points: identity modules whose names come from the module tree.

The design follows TransformerLens (``transformer_lens.hook_points``): every intermediate value the
app shows passes through a :class:`HookPoint`, and :meth:`HookedModule.run_with_cache` records the
values of the hook points it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
import threading

import torch
from torch import nn

NamesFilter = Callable[[str], bool] | Iterable[str] | str | None


class HookPoint(nn.Module):
    """An identity module that lets callers read (or replace) the tensor that passes through it.

    ``self.name`` is set by :class:`HookedModule` from the module tree, e.g.
    ``blocks.0.attn.hook_pattern``.

    A function added with :meth:`add_hook` belongs to the thread that added it: it runs only in that thread's
    forward passes. The app serves every session from one shared model, each session's script in its own thread:
    without this, two sessions running the model at once recorded each other's activations, and one session's
    ablation changed the numbers another session showed (tests/test_hooks_threads.py).
    """

    def __init__(self) -> None:
        super().__init__()
        self.name: str = ""
        # thread ident -> that thread's functions (a plain dict: a model with hooks can still be deep-copied)
        self._fns: dict[int, list[Callable[[torch.Tensor, "HookPoint"], torch.Tensor | None]]] = {}

    def add_hook(self, fn: Callable[[torch.Tensor, "HookPoint"], torch.Tensor | None]) -> None:
        """Call ``fn(tensor, hook)`` on every forward pass run by the calling thread; a non-None return replaces
        the tensor."""
        self._fns.setdefault(threading.get_ident(), []).append(fn)

    def remove_hook(self, fn: Callable) -> None:
        """Forget one function the calling thread added with :meth:`add_hook`.

        Raises:
            ValueError: when this thread did not add ``fn``.
        """
        ident = threading.get_ident()
        fns = self._fns.get(ident, [])
        fns.remove(fn)
        if not fns:
            self._fns.pop(ident, None)

    def remove_hooks(self) -> None:
        """Forget every function added with :meth:`add_hook`, by any thread."""
        self._fns.clear()

    def __getstate__(self) -> dict:
        """A copy of a hook point (``copy.deepcopy``, pickle) has no functions: they belong to the original's threads,
        and the shared model's table of them changes while other sessions run (copying it could fail midway)."""
        state = super().__getstate__()
        state["_fns"] = {}
        return state

    @property
    def active(self) -> bool:
        """True while at least one function of the calling thread listens (lets costly optional hooks be skipped)."""
        return threading.get_ident() in self._fns

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for fn in self._fns.get(threading.get_ident(), ()):
            out = fn(x, self)
            if out is not None:
                x = out
        return x


class ActivationCache(Mapping[str, torch.Tensor]):
    """A read-only mapping ``hook name -> tensor`` recorded by ``run_with_cache``.

    Tensors are detached and keep the shapes listed in docs/ARCHITECTURE.md ("Hook points") (``[batch, pos, d_model]`` for the
    residual stream, ``[batch, head_index, query_pos, key_pos]`` for patterns, ...).
    """

    def __init__(self, tensors: dict[str, torch.Tensor],
                 lazy: dict[str, Callable[[], torch.Tensor]] | None = None) -> None:
        self._tensors = tensors
        self._lazy = dict(lazy or {})  # exact functions of recorded values, computed on first access

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._tensors and name in self._lazy:
            self._tensors[name] = self._lazy.pop(name)()
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"no hook named {name!r} in this cache ({len(self)} hooks recorded)") from None

    def take(self, name: str) -> torch.Tensor:
        """The value of ``name``, removed from the cache (a lazy one is computed, not kept): lets a caller
        convert a large capture one tensor at a time without holding two copies.

        Raises:
            KeyError: for a name not in the cache.
        """
        if name in self._tensors:
            return self._tensors.pop(name)
        if name in self._lazy:
            return self._lazy.pop(name)()
        raise KeyError(f"no hook named {name!r} in this cache")

    def __iter__(self) -> Iterator[str]:
        return iter([*self._tensors, *self._lazy])

    def __len__(self) -> int:
        return len(self._tensors) + len(self._lazy)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self)} hooks)"


def _as_predicate(names_filter: NamesFilter) -> Callable[[str], bool]:
    if names_filter is None:
        return lambda name: True
    if isinstance(names_filter, str):
        return lambda name: name == names_filter
    if callable(names_filter):
        return names_filter
    wanted = set(names_filter)
    return lambda name: name in wanted


class HookedModule(nn.Module):
    """Base class that names its :class:`HookPoint` children and records them on request.

    Subclasses call :meth:`setup_hooks` at the end of ``__init__``.
    """

    def setup_hooks(self) -> None:
        """Name every HookPoint after its path in ``named_modules()`` and index them."""
        self.hook_dict: dict[str, HookPoint] = {}
        for name, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = name
                self.hook_dict[name] = module

    @contextmanager
    def hooks(self, fns: Iterable[tuple[str, Callable]]) -> Iterator[None]:
        """Temporarily add ``(hook name, fn)`` pairs; they are removed on exit, even on error.

        Raises:
            KeyError: for a hook name the model does not have.
        """
        added = []
        try:
            for name, fn in fns:
                if name not in self.hook_dict:
                    raise KeyError(f"the model has no hook named {name!r}")
                self.hook_dict[name].add_hook(fn)
                added.append((self.hook_dict[name], fn))
            yield
        finally:
            for hook, fn in added:
                hook.remove_hook(fn)

    def run_with_hooks(self, tokens: torch.Tensor, fwd_hooks: Iterable[tuple[str | Callable[[str], bool], Callable]] = (),
                       **kwargs) -> torch.Tensor:
        """Run the model with temporary hooks, as TransformerLens' ``HookedTransformer.run_with_hooks``.

        Args:
            tokens: token ids ``[batch, pos]`` (int64).
            fwd_hooks: ``(name or predicate on names, fn)`` pairs; ``fn(tensor, hook)`` may return a replacement
                tensor (same shape) or None. A predicate adds ``fn`` to every hook whose name it accepts.
            **kwargs: passed to ``forward`` (e.g. ``src_tokens`` of an encoder-decoder, ``token_type_ids``).

        Returns:
            What ``forward`` returns: logits ``[batch, pos, d_vocab]``. Gradients follow the caller's
            ``torch.no_grad()`` / ``torch.enable_grad()`` context.

        Raises:
            KeyError: for a hook name the model does not have (a predicate that matches nothing is allowed).
            ValueError: from ``forward``. Every hook is removed afterwards, also on error.
        """
        pairs = []
        for target, fn in fwd_hooks:
            if isinstance(target, str):
                pairs.append((target, fn))
            elif callable(target):
                pairs += [(name, fn) for name in self.hook_dict if target(name)]
            else:
                raise TypeError(f"a hook target must be a name or a predicate on names, got {type(target).__name__}")
        with self.hooks(pairs):
            return self(tokens, **kwargs)

    @torch.no_grad()
    def run_with_cache(self, tokens: torch.Tensor, names_filter: NamesFilter = None,
                       store_dtype: torch.dtype | None = None, keep_float32: tuple[str, ...] = ("hook_logits",),
                       **kwargs):
        """Run the model and record the hook points selected by ``names_filter``.

        Args:
            tokens: token ids, ``[batch, pos]`` (int64).
            names_filter: None (every hook), one name, a list of names, or a predicate on names.
            store_dtype: e.g. ``torch.float16``: floating-point values are stored in that type as they pass
                (halving what a long capture keeps in memory), except the hooks in ``keep_float32``.

        Returns:
            ``(logits, cache)``: logits ``[batch, pos, d_vocab]`` and an :class:`ActivationCache`.

        Raises:
            ValueError: from the model's ``forward`` (bad shape, too long, ids outside the vocabulary).
        """
        keep = _as_predicate(names_filter)
        store: dict[str, torch.Tensor] = {}
        names = [name for name in self.hook_dict if keep(name)]
        lazy, extra = self.lazy_hooks(names, store, kwargs, store_dtype)

        recorded = set(n for n in names if n not in lazy)
        aux: dict[str, torch.Tensor] = {}  # full-precision inputs of the lazy hooks (e.g. q and k for the scores)

        def save(tensor: torch.Tensor, hook: HookPoint) -> None:
            if hook.name in aux_names:
                aux[hook.name] = tensor.detach()
            if hook.name in recorded:
                small = store_dtype is not None and tensor.is_floating_point() and hook.name not in keep_float32
                store[hook.name] = tensor.detach().to(store_dtype) if small else tensor.detach()

        aux_names = set(extra)
        with self.hooks((name, save) for name in recorded | aux_names):
            logits = self(tokens, **kwargs)
        return logits, ActivationCache(store, {name: (lambda fn=fn: fn(aux, logits)) for name, fn in lazy.items()})

    def lazy_hooks(self, names: list[str], store: dict, kwargs: dict, store_dtype: torch.dtype | None = None
                   ) -> tuple[dict, list[str]]:
        """Hooks that ``run_with_cache`` may compute on first read instead of storing, as exact functions of
        other recorded values: ``({name: fn(aux, output)}, names to record privately into aux)``. None here;
        models override it."""
        return {}, []
