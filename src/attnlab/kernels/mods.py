"""Score modifiers: change each score before the mask and the softmax, in FlexAttention's convention.

A mask says *whether* query i may look at key j. A score modifier says *how much more or less* it
wants to: it takes the scaled score ``s = q_i . k_j * scale`` and returns a new one,

    score_mod(score, b, h, q_idx, kv_idx) -> score

where ``b``, ``h``, ``q_idx``, ``kv_idx`` are index tensors that broadcast against ``score`` (batch,
head, query position, key position). Real models use three:

* :func:`softcap` -- ``cap * tanh(s / cap)`` keeps every logit inside (-cap, cap) (Gemma 2);
* :func:`alibi` -- adds ``slope_h * (j - i)``: a penalty that grows with distance, one slope per head,
  instead of position embeddings (Press et al., "Train Short, Test Long", 2021);
* :func:`relative_bias` -- adds a learned number per head and *bucket* of the distance j - i
  (exact for near keys, logarithmic for far ones), as T5 does (Raffel et al., 2019).

:meth:`Mod.from_fn` wraps any FlexAttention-style function, :func:`compose` chains modifiers. A
modifier that holds tensors (a bias table, ALiBi slopes given as a tensor) lists them in
``params``: every form passes gradients to them, and the flash form does so tile by tile (it also
finds a tensor that needs a gradient and is read without being listed: :func:`unlisted`).

The three built-ins also say what they are in closed form (:class:`Closed`): the flash form then fuses them into
its tile instead of calling the function on every tile -- soft-capping folded into the scores' product and one
in-place tanh, ALiBi and T5's bias one in-place add -- and takes their derivative in closed form instead of
autograd's. The function stays the definition: every other form calls it, and tests hold the two together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .argcheck import is_int, positive_int, positive_real, takes

ModFn = Callable[..., torch.Tensor]  # (score, b, h, q_idx, kv_idx) -> score


@dataclass(frozen=True)
class Closed:
    """A built-in modifier in closed form: exactly one of

    * ``cap``: soft-capping, ``cap * tanh(score / cap)``, whose derivative is ``1 - tanh^2``;
    * ``slopes`` (H,): ALiBi, ``score + slopes[h] * (kv_idx - q_idx)``;
    * ``table`` (H, buckets) with ``bucket``: T5's bias, ``score + table[h, bucket(kv_idx - q_idx)]``.

    The additive two have derivative 1 in the score; their tensor's gradient is a sum of dS over each head (times
    the distance for ALiBi, by bucket for T5's)."""

    cap: float | None = None
    slopes: torch.Tensor | None = None
    table: torch.Tensor | None = None
    bucket: Callable[[torch.Tensor], torch.Tensor] | None = None

    @property
    def param(self) -> torch.Tensor | None:
        return self.slopes if self.slopes is not None else self.table

    def bounded(self, qk: float, reach: tuple | None, safe_logit: float) -> bool:
        """True when no modified score can pass ``safe_logit`` and every row's largest stays above -safe_logit, so
        that the flash form may skip the running max (flash.py [P2]): ``qk`` bounds |q.k| * scale, ``reach`` is
        (the largest kv_idx - q_idx any row sees, the smallest over the rows of the largest each sees), or None
        when the mask's reach is not known. A soft-cap of at most safe_logit bounds every score whatever q.k is;
        T5's bias moves a score by at most max|table|; ALiBi's by slope x distance, bounded when the slopes are
        not negative and the reach is known (the causal mask: (0, 0), each row sees itself and nothing after)."""
        if self.cap is not None:
            return self.cap <= safe_logit
        t = self.param.detach()
        if self.table is not None:
            return qk + float(t.abs().max()) <= safe_logit
        if reach is None or bool((t < 0).any()):
            return False
        hi, lo = reach
        most, least = float(t.max()), float(t.min())
        return qk + max(most * hi, least * hi) <= safe_logit and -qk + min(most * lo, least * lo) >= -safe_logit

    def bias(self, H: int, rows: slice, cols: slice, dtype, device, times: float = 1.0) -> tuple:
        """(what to add, broadcasting against (N, H, r, c) scores, computed as ``a * b``) for an additive one:
        ALiBi's ``(slopes (1, H, 1, 1), distance (1, 1, r, c))``, T5's ``(table[h, bucket] (1, H, r, c), None)``;
        ``times`` scales it (log2(e) for the flash form's base-2 scores)."""
        t = self.param.detach().to(device, dtype)[:H] * times
        if self.slopes is not None:
            return t.view(1, H, 1, 1), distance(rows, cols, device).to(dtype)
        one = self.one_bucket(rows, cols, device)
        if one is not None:  # the whole tile in one bucket (far keys): a constant per head
            return t[:, one].view(1, H, 1, 1), None
        return t[:, self.bucket(distance(rows, cols, device)[0, 0])].unsqueeze(0), None

    def one_bucket(self, rows: slice, cols: slice, device) -> int | None:
        """T5's bucket when every distance of the block falls into the same one, else None. The bucket grows with
        |distance| on each side of 0, so the block's two extreme distances decide it."""
        lo, hi = cols.start - (rows.stop - 1), (cols.stop - 1) - rows.start
        if lo < 0 < hi:
            return None
        ends = self.bucket(torch.tensor([lo, hi], device=device))
        return int(ends[0]) if int(ends[0]) == int(ends[1]) else None

    def grad(self, dS: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
        """The gradient of the additive modifier's tensor from one tile's dS (N, H, r, c) in natural units."""
        rel = distance(rows, cols, dS.device)
        H = dS.shape[1]  # the attention's heads: a tensor may hold more, whose gradient is then 0
        held = self.param
        g = dS.new_zeros(held.shape)
        if self.slopes is not None:
            g[:H] = (dS * rel.to(dS.dtype)).sum(dim=(0, 2, 3))
        elif (one := self.one_bucket(rows, cols, dS.device)) is not None:
            g[:H, one] = dS.sum(dim=(0, 2, 3))
        else:
            g[:H].index_add_(1, self.bucket(rel[0, 0]).flatten(), dS.sum(dim=0).reshape(H, -1))
        return g.to(held.device, held.dtype)  # where the tensor lives, as autograd wants its gradient


def distance(rows: slice, cols: slice, device) -> torch.Tensor:
    """kv_idx - q_idx over a block of scores, (1, 1, r, c) int64."""
    return (torch.arange(cols.start, cols.stop, device=device).view(1, -1)
            - torch.arange(rows.start, rows.stop, device=device).view(-1, 1)).view(1, 1, rows.stop - rows.start, -1)


class Mod:
    """A score modifier: a function of (score, b, h, q_idx, kv_idx) and the tensors it holds."""

    def __init__(self, fn: ModFn, name: str, params: Sequence[torch.Tensor] = (), closed: Closed | None = None):
        if not callable(fn):
            raise TypeError(f"score_mod must be callable as fn(score, b, h, q_idx, kv_idx), got {type(fn).__name__}")
        takes(fn, 5, f"score_mod {name}", "(score, b, h, q_idx, kv_idx) -> score")
        for p in params:
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"score modifier {name}: params must be tensors, got {type(p).__name__}")
        self.fn = fn
        self.name = name
        self.params = tuple(params)
        self.closed = closed  # what a built-in is in closed form, for the flash form's fused path

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
    if not torch.is_grad_enabled() or _tracing():
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


def softcap(cap: float) -> Mod:
    """``cap * tanh(score / cap)``: every score squashed into (-cap, cap); Gemma 2 uses 50 (30 for the logits)."""
    c = positive_real("cap", cap, "a positive, finite", owner="softcap")

    def fn(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / c) * c

    return Mod(fn, f"softcap({c:g})", closed=Closed(cap=c))


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The geometric slopes of ALiBi: for 8 heads 1/2, 1/4, ..., 1/256.

    For a head count that is not a power of two, the paper takes the slopes of the next lower power
    of two and fills up with every other slope of twice that many heads.
    """
    positive_int("num_heads", num_heads, owner="alibi")

    def powers(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** math.floor(math.log2(num_heads))
    slopes = powers(p) + powers(2 * p)[0::2][: num_heads - p]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi(num_heads: int | None = None, *, slopes: torch.Tensor | None = None) -> Mod:
    """ALiBi: ``score + slope_h * (kv_idx - q_idx)``, a linear penalty on distance, one slope per head.

    ``alibi(8)`` uses the paper's geometric slopes; ``alibi(slopes=t)`` any (H,) tensor (learnable if
    it requires grad: it is then one of the modifier's ``params``).
    """
    if (num_heads is None) == (slopes is None):
        raise ValueError("alibi takes either num_heads or slopes=, not both and not neither")
    if slopes is None:
        t, params = alibi_slopes(num_heads), ()
    else:
        if not isinstance(slopes, torch.Tensor) or slopes.dim() != 1 or not slopes.is_floating_point():
            raise ValueError(f"alibi slopes must be a 1-d float tensor (one per head), got "
                             f"{tuple(slopes.shape) if isinstance(slopes, torch.Tensor) else type(slopes).__name__}")
        bad = ~torch.isfinite(slopes.detach())
        if bool(bad.any()):
            raise ValueError(f"alibi slopes must be finite numbers; slope {int(bad.nonzero()[0, 0])} of "
                             f"{slopes.shape[0]} is {float(slopes.detach()[bad][0])}")
        t, params = slopes, (slopes,)
    H = t.shape[0]

    def fn(score, b, h, q_idx, kv_idx):
        _heads("alibi", H, score, h)
        return score + t.to(score.device, score.dtype)[h] * (kv_idx - q_idx).to(score.dtype)

    return Mod(fn, f"alibi({H})", params, closed=Closed(slopes=t))


def t5_bucket(rel: torch.Tensor, num_buckets: int, max_distance: int, bidirectional: bool) -> torch.Tensor:
    """T5's buckets for relative positions ``rel = kv_idx - q_idx``: exact when near, log-spaced when far."""
    bucket = torch.zeros_like(rel)
    n = num_buckets
    if bidirectional:
        n //= 2
        bucket = bucket + (rel > 0).long() * n
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)  # only the past counts; future keys share bucket 0
    exact = n // 2
    is_small = rel < exact
    far = exact + (torch.log(rel.clamp(min=1).float() / exact) / math.log(max_distance / exact)
                   * (n - exact)).long()
    far = torch.clamp(far, max=n - 1)
    return bucket + torch.where(is_small, rel, far)


def relative_bias(table: torch.Tensor, num_buckets: int | None = None, max_distance: int = 128,
                  bidirectional: bool = True) -> Mod:
    """T5-style learned relative bias: ``score + table[h, bucket(kv_idx - q_idx)]``.

    ``table`` is an (H, num_buckets) tensor, usually a learnable parameter (its gradient is computed by
    every form). ``bidirectional=False`` is T5's decoder: future keys all share one bucket.
    """
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or not table.is_floating_point():
        raise ValueError(f"relative_bias needs a float table of shape (H, num_buckets), got "
                         f"{tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__}")
    H, nb = table.shape
    if not bool(torch.isfinite(table.detach()).all()):
        raise ValueError(f"relative_bias: the table of shape {(H, nb)} holds NaN or infinite values")
    num_buckets = nb if num_buckets is None else num_buckets
    if num_buckets != nb:
        raise ValueError(f"relative_bias: table has {nb} buckets but num_buckets={num_buckets}")
    min_buckets = 4 if bidirectional else 2
    if num_buckets < min_buckets:
        raise ValueError(f"relative_bias needs at least {min_buckets} buckets, got {num_buckets}")
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if not is_int(max_distance) or max_distance <= exact:
        raise ValueError(f"relative_bias: max_distance must be an integer above {exact}, got {max_distance!r}")

    def fn(score, b, h, q_idx, kv_idx):
        _heads("relative_bias", H, score, h)
        bucket = t5_bucket(kv_idx - q_idx, num_buckets, max_distance, bidirectional)  # (1, 1, r, c)
        return score + table.to(score.device, score.dtype)[h, bucket]

    return Mod(fn, f"relative_bias({H}x{num_buckets})", (table,),
               closed=Closed(table=table, bucket=lambda rel: t5_bucket(rel, num_buckets, max_distance, bidirectional)))


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


def _heads(name: str, H: int, score: torch.Tensor, h: torch.Tensor) -> None:
    """A per-head modifier must have a slope / table row for every head it is asked about."""
    top = int(h.max()) + 1 if h.numel() and not _tracing() else 0
    if top > H:
        raise ValueError(f"score modifier {name} holds {H} heads but the attention has at least {top} "
                         f"(scores of shape {tuple(score.shape)})")


def _tracing() -> bool:
    try:
        return torch.compiler.is_compiling()
    except AttributeError:  # older PyTorch
        return False
