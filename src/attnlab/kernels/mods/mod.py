"""A score modifier: a function of (score, b, h, q_idx, kv_idx) and the tensors it holds, in FlexAttention's convention.

:class:`Mod` wraps any such function (:meth:`Mod.from_fn`), :func:`compose` chains them; every form calls the
function (the matrix form on the whole score matrix, :func:`apply_dense`; the flash form tile by tile, with the
index tensors of :func:`indices`). A modifier that reads a tensor needing a gradient without listing it in
``params`` is found by :func:`unlisted`. The built-ins the flash form fuses instead of calling are subclasses of
:class:`attnlab.kernels.mods.fused.Fused`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..argcheck import takes

ModFn = Callable[..., torch.Tensor]  # (score, b, h, q_idx, kv_idx) -> score


class Mod:
    """A score modifier: a function of (score, b, h, q_idx, kv_idx) and the tensors it holds."""

    def __init__(self, fn: ModFn, name: str, params: Sequence[torch.Tensor] = ()):
        if not callable(fn):
            raise TypeError(f"score_mod must be callable as fn(score, b, h, q_idx, kv_idx), got {type(fn).__name__}")
        takes(fn, 5, f"score_mod {name}", "(score, b, h, q_idx, kv_idx) -> score")
        for p in params:
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"score modifier {name}: params must be tensors, got {type(p).__name__}")
        self.fn = fn
        self.name = name
        self.params = tuple(params)

    def __repr__(self) -> str:
        return f"Mod({self.name})"

    @classmethod
    def from_fn(cls, fn: ModFn, name: str | None = None, params: Sequence[torch.Tensor] = ()) -> Mod:
        """Wrap a FlexAttention-style ``score_mod``. List in ``params`` the tensors it reads that need gradients."""
        if isinstance(fn, Mod):
            return fn
        return cls(fn, name or getattr(fn, "__name__", "custom"), params)

    def __call__(self, score, b, h, q_idx, kv_idx) -> torch.Tensor:
        return self.fn(score, b, h, q_idx, kv_idx)

    def apply(self, score: torch.Tensor, b, h, q_idx, kv_idx) -> torch.Tensor:
        """Call the modifier and check that it returned a score tensor of the same shape and dtype."""
        out = self.fn(score, b, h, q_idx, kv_idx)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"score modifier {self.name} returned {type(out).__name__}, not a tensor")
        if out.shape != score.shape:
            raise ValueError(f"score modifier {self.name} returned shape {tuple(out.shape)} for scores of shape "
                             f"{tuple(score.shape)}; it must return one score per input score")
        if out.dtype != score.dtype:
            raise TypeError(f"score modifier {self.name} returned dtype {out.dtype} for scores of dtype "
                            f"{score.dtype}; cast what it adds to score.dtype")
        return out


class _Reads(torch.overrides.TorchFunctionMode):
    """Records the tensors a function reads that need gradients and that it did not make itself."""

    def __init__(self, own: tuple):
        super().__init__()
        self.made = list(own)  # kept alive while recording, so that an id is never reused
        self.found: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        seen = {id(t) for t in self.made} | {id(t) for t in self.found}
        for x in _tensors((args, kwargs)):
            if x.requires_grad and id(x) not in seen:
                self.found.append(x)
                seen.add(id(x))
        self.made += list(_tensors(out))
        return out


def _tensors(x):
    """Every tensor in a nest of tuples, lists and dicts."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, tuple | list):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def unlisted(mod: Mod, N: int, H: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, ...]:
    """The tensors that need gradients which ``mod`` reads without listing them in its ``params`` (a closure
    over a learnable ``w``, say), found by calling it once on one score per head while watching every tensor
    it touches. A form that computes the modifier's gradient itself (the flash form) adds them to ``params``,
    so that they get their gradients as a listed one would."""
    if not torch.is_grad_enabled() or tracing():
        return ()
    score = torch.zeros(N, H, 1, 1, dtype=dtype, device=device)
    idx = indices(N, H, 0, 1, 0, 1, device)
    reads = _Reads((score, *idx))
    with reads:
        mod.fn(score, *idx)
    listed = {id(p) for p in mod.params}
    return tuple(t for t in reads.found if id(t) not in listed)


def as_mod(score_mod) -> Mod | None:
    """None, a :class:`Mod`, or a plain callable (wrapped) -> a Mod or None; anything else is a TypeError."""
    if score_mod is None or isinstance(score_mod, Mod):
        return score_mod
    if not callable(score_mod):
        raise TypeError(f"score_mod must be None, an attnlab.mods.Mod or a function "
                        f"(score, b, h, q_idx, kv_idx) -> score, got {type(score_mod).__name__}")
    return Mod.from_fn(score_mod)


def indices(N: int, H: int, q0: int, q1: int, k0: int, k1: int, device) -> tuple[torch.Tensor, ...]:
    """b (N,1,1,1), h (1,H,1,1), q_idx (1,1,r,1), kv_idx (1,1,1,c): the index tensors of a block of scores."""
    return (torch.arange(N, device=device).view(N, 1, 1, 1),
            torch.arange(H, device=device).view(1, H, 1, 1),
            torch.arange(q0, q1, device=device).view(1, 1, -1, 1),
            torch.arange(k0, k1, device=device).view(1, 1, 1, -1))


def apply_dense(mod: Mod | None, scores: torch.Tensor) -> torch.Tensor:
    """Apply ``mod`` to a whole (N, H, L, S) score matrix (the matrix form and the oracle)."""
    if mod is None:
        return scores
    N, H, L, S = scores.shape
    return mod.apply(scores, *indices(N, H, 0, L, 0, S, scores.device))


def compose(*mods) -> Mod:
    """Apply modifiers one after another: ``compose(alibi(8), softcap(30))`` adds ALiBi, then caps."""
    ms = [as_mod(m) for m in mods]
    if not ms or any(m is None for m in ms):
        raise TypeError("compose takes one or more score modifiers")

    def fn(score, b, h, q_idx, kv_idx):
        for m in ms:
            score = m.apply(score, b, h, q_idx, kv_idx)
        return score

    params = tuple(p for m in ms for p in m.params)
    return Mod(fn, " then ".join(m.name for m in ms), params)


def check_heads(name: str, H: int, score: torch.Tensor, h: torch.Tensor) -> None:
    """A per-head modifier must have a slope / table row for every head it is asked about."""
    top = int(h.max()) + 1 if h.numel() and not tracing(h, score) else 0
    if top > H:
        raise ValueError(f"score modifier {name} holds {H} heads but the attention has at least {top} "
                         f"(scores of shape {tuple(score.shape)})")


def tracing(*tensors) -> bool:
    """Compiled, or called on ``tensors`` one of which is batched by torch.vmap (FlexAttention evaluates a modifier
    one index at a time that way): a value read out of a tensor (``int(h.max())``) is not there to read."""
    try:
        if torch.compiler.is_compiling():
            return True
    except AttributeError:  # older PyTorch
        pass
    batched = getattr(torch._C._functorch, "is_batchedtensor", None)
    return batched is not None and any(isinstance(t, torch.Tensor) and batched(t) for t in tensors)
