"""Attention in four lines: the form the lesson teaches.

    scores  = q @ k^T * scale          # (N, H, L, S): how well each query matches each key
    scores  = mask(scores)             # masked keys get -inf (bool mask) or a bias (float mask)
    weights = softmax(scores)          # each row sums to 1: how much each query listens to each key
    out     = weights @ v              # (N, H, L, Ev): a weighted average of the values

With attention sinks (gpt-oss, ``sinks=``) each head's sink logit is one more term of every row's
softmax sum, a column with no value (:func:`sink_softmax`).

It holds the whole L x S matrix of scores, so its memory grows with the square of the length --
the cost the flash form removes. Half-precision inputs are computed in float32 and the result is
rounded back, as PyTorch's reference path does on the CPU.
"""

from __future__ import annotations

import torch

from . import dropout
from ._check import check, check_score_mod, empty_output
from .mods import apply_dense


def safe_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim that returns zeros (not NaN) for rows whose every score is -inf.

    The row max is subtracted first: exp(90) already overflows float32, so the stable softmax is
    not optional. A row with no visible key has max -inf; we subtract 0 there, every exp is 0,
    and dividing by a sum of 1 instead of 0 gives the zeros PyTorch returns (its _safe_softmax).
    """
    m = scores.amax(dim=-1, keepdim=True).detach()  # the max only stabilises; softmax ignores it
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(scores - m)
    s = e.sum(dim=-1, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)


def sink_softmax(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """The softmax of each row of scores (N, H, L, S) and its head's sink (H,), the sink's own weight dropped:

        w_ij = exp(s_ij) / (sum_j' exp(s_ij') + exp(sink_h))

    -- gpt-oss's ``softmax(cat([scores, sinks]))[..., :-1]`` without the copy of every score that the cat makes.
    The max is taken over the scores *and* the sink, as gpt-oss takes it over the combined row: a sink far above
    the scores then gives weights near 0, not exp(overflow), and a row that sees no key gets a finite max (the
    sink) and all-zero weights. Only a row whose sink is -inf too has no max; it gets zeros, as :func:`safe_softmax`.
    """
    sink = sinks.view(1, -1, 1, 1)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), sink).detach()  # the max only stabilises
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(scores - m)
    s = e.sum(dim=-1, keepdim=True) + torch.exp(sink - m)  # the sink's term: in the sum, not in the output
    return e / torch.where(s == 0, torch.ones_like(s), s)


def apply_mask(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Bool mask: False -> -inf. Float mask: added."""
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    return scores + mask.to(scores.dtype)


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, return_weights: bool = False, score_mod=None, sinks=None):
    """The matrix form. With ``return_weights=True`` returns ``(out, weights)``; weights (..., H, L, S).

    ``score_mod(score, b, h, q_idx, kv_idx)`` (:mod:`attnlab.mods`) changes the scaled scores before the mask.
    ``sinks`` (H,): one sink logit per query head in each row's softmax (:func:`sink_softmax`); the weights
    returned are the keys' alone, so a row's sum to less than 1.
    """
    a = check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, sinks=sinks)
    mod = check_score_mod(score_mod)
    if a.trivial:  # an empty dim: nothing to attend to
        out = a.unflatten(empty_output(a))
        return (out, a.unflatten(a.q.new_zeros(a.N, a.H, a.L, a.S))) if return_weights else out
    work = a.work  # half precision is computed in float32
    q, k, v = a.q.to(work), a.k.to(work), a.v.to(work)
    if a.groups > 1:  # GQA: each key/value head serves `groups` consecutive query heads
        k = k.repeat_interleave(a.groups, dim=1)
        v = v.repeat_interleave(a.groups, dim=1)

    scores = (q @ k.transpose(-2, -1)) * a.scale  # (N, H, L, S)
    scores = apply_dense(mod, scores)  # a score modifier, if any: before the mask, as in FlexAttention
    scores = apply_mask(scores, a.dense_mask())
    weights = safe_softmax(scores) if a.sinks is None else sink_softmax(scores, a.sinks.to(work))
    if a.dropout_p > 0.0:
        weights = dropout.apply(weights, dropout.draw_seed(), a.dropout_p)
    out = weights @ v  # (N, H, L, Ev)

    out = a.unflatten(out.to(a.q.dtype))
    if return_weights:
        return out, a.unflatten(weights.to(a.q.dtype))
    return out
