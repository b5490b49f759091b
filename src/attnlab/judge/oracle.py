"""The float64 oracle: attention written once, plainly, to judge every other form.

Every verdict ``attnlab verify`` gives rests on this file, so it shares no code with the forms it
judges -- in the spirit of FlashAttention's ``attention_ref``. It has its own argument handling
(ranks, broadcasting, grouped-query heads by index), turns every kind of mask into a dense tensor
by its own code, and imports nothing from ``attnlab.kernels``: the mask and score-modifier
*definitions* a case hands it (``attnlab.masks``, ``attnlab.mods``) are only called, as functions of
the indices, on index grids made here. It is itself checked: on every case verify runs, PyTorch's
own float64 answer must agree with it to float64 rounding (:mod:`attnlab.judge.judge`).

    scores = q kᵀ · scale               (N, H, L, S); query head h reads key head h // (H / Hkv)
    scores = score_mod(scores, b, h, i, j)
    scores = masked                     bool: False -> -inf;  float: added;  is_causal: j > i -> -inf
    P      = softmax(scores)            a row with no visible key: P = 0, as PyTorch returns zeros
    P      = P · keep / (1 - p)         dropout, with the keep-mask the judged form used
    out    = P v
    lse    = log Σ_j exp(scores)        the log-sum-exp flash kernels return: -inf for a row with no key

With attention sinks (gpt-oss's ``sinks``, one logit per query head) each row's softmax takes its head's sink as
one more term, whose weight goes to no value:

    P      = exp(scores) / (Σ_j exp(scores) + exp(sink_h))     P_sink = exp(sink_h) / (the same sum)
    lse    = log(Σ_j exp(scores) + exp(sink_h))                a row that sees no key: P = 0, out = 0, lse = sink_h

The tolerance rule that compares a form with this answer lives in :mod:`attnlab.judge.rule`.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import torch

from attnlab.masks import Mask
from attnlab.shapes import broadcast_shapes


@dataclass(frozen=True)
class Forward:
    """One float64 forward pass, flattened to (N, H, L, .): what the rounding floor is computed from."""

    q: torch.Tensor  # (N, H, L, E), float64
    k: torch.Tensor  # (N, H, S, E): each query head's own key head (GQA read by index)
    v: torch.Tensor  # (N, H, S, Ev)
    scale: float
    groups: int  # query heads per key head
    P: torch.Tensor  # (N, H, L, S) the weights before dropout
    Pd: torch.Tensor  # (N, H, L, S) after dropout
    out: torch.Tensor  # (N, H, L, Ev)
    batch: tuple[int, ...]  # the caller's leading dims
    two_d: bool  # the caller passed (L, E) inputs: no batch, no head dim
    lse: torch.Tensor | None = None  # (N, H, L) log-sum-exp of the masked scores; -inf where a row sees no key
    sinks: torch.Tensor | None = None  # (N, H, L) each row's sink logit (gpt-oss's sinks, per query head), or None
    sink_P: torch.Tensor | None = None  # (N, H, L) the weight each row gives its sink (P's rows sum to 1 - it)
    scores: torch.Tensor | None = None  # (N, H, L, S) the scores the softmax takes: scaled, modified, masked (-inf)


def reference(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
              grad_out=None, keep=None, dropout_p=0.0, score_mod=None, score_params=None, sinks=None):
    """Float64 attention. Returns ``out`` or, with ``grad_out``, ``(out, dq, dk, dv[, dmask][, dparams...][,
    dsinks])``.

    ``attn_mask``: None, a bool (True = attend) or float (added) tensor that broadcasts to
    (..., H, L, S), PyTorch's ``CausalBias``, or an ``attnlab.masks`` mask. ``keep`` (bool,
    broadcastable to (N, H, L, S)) applies dropout with a known keep-mask. ``score_mod`` (a function
    ``(score, b, h, q_idx, kv_idx) -> score``, e.g. an ``attnlab.mods.Mod`` built on float64 tensors)
    changes the scaled scores before the mask; with ``grad_out`` the gradients of the tensors it reads that
    require grad come last: ``score_params`` where given (a modifier need not list what it reads), else
    its ``params``. ``sinks``: None, or one sink logit per query head, (H,) -- or, for the judge's wrong readings of
    them, any tensor that broadcasts to (N, H, L): a logit per row; with ``grad_out`` its gradient comes last.
    """
    return answer(query, key, value, attn_mask, is_causal, scale, enable_gqa, grad_out, keep, dropout_p, score_mod,
                  score_params, sinks)[0]


def answer(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
           grad_out=None, keep=None, dropout_p=0.0, score_mod=None, score_params=None, sinks=None) -> tuple:
    """(:func:`reference`'s answer, the :class:`Forward` it came from, detached): the one forward a case needs,
    for the rounding floor and the hypotheses as well as the answer."""
    want = grad_out is not None
    q, k, v = (t.detach().double().cpu().requires_grad_(want) for t in (query, key, value))
    m = attn_mask
    if isinstance(m, torch.Tensor) and causal_variant(m) is None:
        m = m.detach().cpu()
        if m.dtype != torch.bool:
            m = m.double().requires_grad_(want and attn_mask.requires_grad)
    sk = None if sinks is None else sinks.detach().double().cpu().requires_grad_(want)
    f = forward(q, k, v, m, is_causal, scale, enable_gqa, keep, dropout_p, score_mod, sk)
    out = unflatten(f.out, f)
    if not want:
        return out.detach(), _detached(f)
    wrt = [q, k, v] + ([m] if isinstance(m, torch.Tensor) and m.requires_grad else [])
    wrt += [t for t in (getattr(score_mod, "params", ()) if score_params is None else score_params) if t.requires_grad]
    wrt += [sk] if sk is not None else []
    grads = torch.autograd.grad(out, wrt, grad_out.detach().double().cpu().reshape(out.shape), allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for t, g in zip(wrt, grads, strict=True)]
    return (out.detach(), *grads), _detached(f)


def _detached(f: Forward) -> Forward:
    return Forward(**{n: t.detach() if isinstance(t, torch.Tensor) else t for n, t in vars(f).items()})


def traced(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, score_mod=None,
           sinks=None) -> tuple[tuple, Forward]:
    """((q, k, v[, a float mask that requires grad]) as float64 leaves that require grad, the oracle's
    :class:`Forward` on them, its graph kept): what a model of the backward takes gradients through -- from the
    scores (and the expanded values) to the inputs, past the scale, the score modifier, the mask and the head map,
    whatever the API."""
    q, k, v = (t.detach().double().cpu().requires_grad_(True) for t in (query, key, value))
    m, leaves = attn_mask, [q, k, v]
    if isinstance(m, torch.Tensor) and causal_variant(m) is None:
        m = m.detach().cpu()
        if m.dtype != torch.bool:
            m = m.double().requires_grad_(attn_mask.requires_grad)
            leaves += [m] if m.requires_grad else []
    sk = None if sinks is None else sinks.detach().double().cpu()
    return tuple(leaves), forward(q, k, v, m, is_causal, scale, enable_gqa, None, 0.0, score_mod, sk)


def forward(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, keep=None, dropout_p=0.0,
            score_mod=None, sinks=None) -> Forward:
    """The oracle's forward on float64 CPU tensors, differentiable: a :class:`Forward`. ``sinks``: see
    :func:`reference`."""
    two_d = q.dim() == k.dim() == v.dim() == 2
    q, k, v, batch = _broadcast(q, k, v, enable_gqa)  # (N, H, L, E), (N, Hkv, S, E), (N, Hkv, S, Ev)
    N, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = H // Hkv if Hkv else 1
    head = torch.arange(H) // G  # query head h reads key head h // G: repeat_interleave, not repeat
    kx, vx = k[:, head], v[:, head]  # (N, H, S, .)
    sc = (1.0 / math.sqrt(E) if E else 1.0) if scale is None else float(scale)
    scores = q @ kx.transpose(-2, -1) * sc  # (N, H, L, S)
    if score_mod is not None:
        b, h, i, j = grids(N, H, L, S)
        scores = score_mod(scores, b, h, i, j)
    visible = _visible(attn_mask, is_causal, N, H, L, S, batch, two_d)
    if visible is not None and visible.dtype == torch.bool:
        scores = scores.masked_fill(~visible, -math.inf)
    elif visible is not None:
        scores = scores + visible
    if sinks is None:
        P = softmax_rows(scores)  # rows that see no key: zeros, as PyTorch
        lse, row_sinks, sink_P = torch.logsumexp(scores, dim=-1), None, None  # log(0) = -inf: a row with no key
    else:
        P, lse, row_sinks, sink_P = _with_sinks(scores, sinks)
    Pd = P
    if keep is not None:
        Pd = P * keep.to(P.device, torch.float64) * (1.0 / (1.0 - dropout_p) if dropout_p < 1 else 0.0)
    out = Pd @ vx  # (N, H, L, Ev)
    return Forward(q, kx, vx, sc, G, P, Pd, out, batch, two_d, lse, row_sinks, sink_P, scores)


def softmax_rows(scores: torch.Tensor) -> torch.Tensor:
    """The softmax of each row of ``scores`` over its last dim, a row whose every score is -inf (it sees no key) all
    zeros, as PyTorch gives it."""
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    return torch.softmax(torch.where(dead, 0.0, scores), dim=-1).masked_fill(dead, 0.0)


def _with_sinks(scores: torch.Tensor, sinks: torch.Tensor) -> tuple:
    """(P, lse, each row's sink, the sink's weight) of scores (N, H, L, S) whose rows each take one more term, the
    row's sink logit, into their softmax: the sink a column of the row with no value, dropped after the softmax. A
    row whose every score and sink are -inf gives zeros (and lse -inf), as a row that sees no key without sinks."""
    N, H, L, _ = scores.shape
    per_row = sinks.reshape(1, H, 1) if sinks.dim() == 1 else sinks
    per_row = per_row.expand(N, H, L)
    row = torch.cat([scores, per_row[..., None]], dim=-1)  # (N, H, L, S + 1)
    W = softmax_rows(row)
    return W[..., :-1], torch.logsumexp(row, dim=-1), per_row, W[..., -1]


def _broadcast(q, k, v, enable_gqa):
    """q, k, v as (N, H, L, E), (N, Hkv, S, E), (N, Hkv, S, Ev), and the caller's batch dims.

    Leading dims broadcast as in PyTorch; head counts broadcast (1 against n) unless ``enable_gqa``
    lets a key head serve H / Hkv query heads. 2-D inputs are one head with no batch.
    """
    if q.dim() == k.dim() == v.dim() == 2:
        q, k, v = q[None], k[None], v[None]
    rank = max(3, q.dim(), k.dim(), v.dim())
    q, k, v = (t.reshape((1,) * (rank - t.dim()) + tuple(t.shape)) for t in (q, k, v))
    batch = tuple(broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3]))
    Hkv = broadcast_shapes((k.shape[-3],), (v.shape[-3],))[0]
    H = q.shape[-3]
    if not (enable_gqa and Hkv and H % Hkv == 0):
        H = Hkv = broadcast_shapes((H,), (Hkv,))[0]
    N = math.prod(batch)
    q = q.expand(*batch, H, *q.shape[-2:]).reshape(N, H, *q.shape[-2:])
    k = k.expand(*batch, Hkv, *k.shape[-2:]).reshape(N, Hkv, *k.shape[-2:])
    v = v.expand(*batch, Hkv, *v.shape[-2:]).reshape(N, Hkv, *v.shape[-2:])
    return q, k, v, batch


def grids(N, H, L, S):
    """Index tensors b (N,1,1,1), h (1,H,1,1), i (1,1,L,1), j (1,1,1,S) that broadcast against the scores."""
    return (torch.arange(N).view(N, 1, 1, 1), torch.arange(H).view(1, H, 1, 1),
            torch.arange(L).view(1, 1, L, 1), torch.arange(S).view(1, 1, 1, S))


def _visible(attn_mask, is_causal, N, H, L, S, batch, two_d):
    """Every kind of mask as one dense tensor broadcastable to (N, H, L, S): bool (True = attend) or float."""
    _, _, i, j = grids(N, H, L, S)
    variant = causal_variant(attn_mask)
    if variant is not None:  # PyTorch's CausalBias: its storage is not a bias, it names a causal variant
        m = j <= i + (S - L if variant == "lower_right" else 0)
    elif isinstance(attn_mask, Mask):
        m = _evaluate(attn_mask, N, H, L, S)
    elif isinstance(attn_mask, torch.Tensor):
        full = (L, S) if two_d else (*batch, H, L, S)
        m = attn_mask.expand(full).reshape(N, H, L, S)
    else:
        m = None
    if is_causal:  # upper-left, as PyTorch; with a mask too, the keys both allow
        causal = j <= i
        m = causal if m is None else (m & causal if m.dtype == torch.bool else m.masked_fill(~causal, -math.inf))
    return m


def cpu64(mask):
    """A mask argument as the oracle reads it: a float tensor in float64 on the CPU, a bool one on the CPU; a mask
    function, PyTorch's CausalBias and None as they are."""
    if not isinstance(mask, torch.Tensor) or causal_variant(mask) is not None:
        return mask
    return mask.detach().cpu().double() if mask.is_floating_point() else mask.detach().cpu()


def causal_variant(m) -> str | None:
    """"upper_left" or "lower_right" for PyTorch's ``CausalBias`` (``torch.nn.attention.bias``), else None.
    (Its module is imported only where such a mask exists: importing it costs seconds.)"""
    bias = sys.modules.get("torch.nn.attention.bias")
    if bias is None or not isinstance(m, bias.CausalBias):
        return None
    return "lower_right" if m.variant == bias.CausalVariant.LOWER_RIGHT else "upper_left"


def _evaluate(mask: Mask, N, H, L, S) -> torch.Tensor:
    """A mask function asked once per (b, h, i, j), as FlexAttention asks it (through torch.vmap): (N, H, L, S)."""
    b, h, i, j = (t.reshape(-1) for t in torch.meshgrid(torch.arange(N), torch.arange(H), torch.arange(L),
                                                        torch.arange(S), indexing="ij"))
    seen = torch.vmap(lambda b, h, i, j: torch.as_tensor(mask(b, h, i, j, L, S)))(b, h, i, j)
    if seen.dtype != torch.bool:
        raise TypeError(f"mask {mask!r} returned dtype {seen.dtype}; a mask function returns bools")
    return seen.reshape(N, H, L, S)


def as_key(f: Forward) -> Forward:
    """A forward with sinks as the problem it equals without them: one more key, key and value 0, whose score is the
    row's sink (q . 0 * scale + the sink as a float mask's bias). What a rounding is modelled on (the floors, the
    precision causes): the sink is one more term of each row's sums. A forward without sinks as it is."""
    if f.sinks is None:
        return f
    N, H, L = f.sink_P.shape
    zero_k = f.k.new_zeros(N, H, 1, f.k.shape[-1])
    zero_v = f.v.new_zeros(N, H, 1, f.v.shape[-1])
    col = f.sink_P[..., None]
    return Forward(f.q, torch.cat([f.k, zero_k], 2), torch.cat([f.v, zero_v], 2), f.scale, f.groups,
                   torch.cat([f.P, col], -1), torch.cat([f.Pd, col], -1), f.out, f.batch, f.two_d, f.lse)


def unflatten(x: torch.Tensor, f: Forward) -> torch.Tensor:
    """(N, H, L, .) -> the caller's leading dims + (H, L, .), or (L, .) for 2-D inputs."""
    x = x.reshape(*f.batch, *x.shape[1:])
    return x[0] if f.two_d else x
