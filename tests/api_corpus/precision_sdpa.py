"""Precision bugs on F.scaled_dot_product_attention's signature, two per cause in different rounding orders: scores
in the input dtype before the softmax (rounded after the dot product and again after the scale, or once after the
scale), the scale folded into q, or split as scale ** 0.5 into q and k, in the input dtype, a float32 scale or
float32 accumulator in a float64 run, and the softmax in bfloat16 or in float16.

None is wrong in exact arithmetic; each loses more than its dtype's rounding allows somewhere.
"""

from __future__ import annotations

import math

import torch

from tests.api_corpus.sdpa import BLOCK_N, sdpa_args


def _softmax_v(s, v, bias):
    """Float softmax of s (+ bias) times v, rows with no key 0."""
    s = s if bias is None else s + bias
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), 0.0, m)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    return e / torch.where(l > 0, l, 1.0) @ v


def sdpa_scores_input_dtype(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Computes q @ k^T and the scale in the input dtype and only then upcasts to float32 for the softmax: bfloat16
    scores (two roundings) before the softmax."""
    qi, ki, vi, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, dtype=q.dtype)
    s = (qi @ ki.transpose(-2, -1) * sc).to(v.dtype if v.dtype == torch.float64 else torch.float32)
    return _softmax_v(s, vi.to(s.dtype), bias).to(q.dtype)


def sdpa_scale_folded_q(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Folds the softmax scale into q in the input dtype (q * scale rounded to bfloat16), then exact float32
    scores."""
    _, _, _, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, dtype=q.dtype)
    qs = q * sc  # in q's dtype
    qc, kc, vc, _, _ = sdpa_args(qs, k, v, None, dropout_p, False, 1.0, enable_gqa)
    return _softmax_v(qc @ kc.transpose(-2, -1), vc, bias).to(q.dtype)


def sdpa_scale_float32_tensor(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                              enable_gqa=False):
    """Makes the scale a tensor with torch.tensor(scale), float32 by default: in a float64 run every score is
    multiplied by a scale rounded to float32."""
    qc, kc, vc, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    scale_t = torch.tensor(sc, device=q.device)
    return _softmax_v(qc @ kc.transpose(-2, -1) * scale_t, vc, bias).to(q.dtype)


def sdpa_softmax_input_dtype(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Subtracts the row max in float32, then takes exp, the sum and the division in the input dtype: a bfloat16
    softmax."""
    qc, kc, vc, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    s = qc @ kc.transpose(-2, -1) * sc
    s = s if bias is None else s + bias
    m = s.detach().amax(-1, keepdim=True)
    z = (s - torch.where(torch.isneginf(m), 0.0, m)).to(q.dtype)
    e = torch.exp(z)
    l = e.sum(-1, keepdim=True)
    p = e / torch.where(l > 0, l, torch.ones_like(l))
    return (p.to(vc.dtype) @ vc).to(q.dtype)


def sdpa_softmax_float16(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Runs the softmax in float16 whatever the input dtype (an autocast habit): float32 scores, torch.softmax on
    their float16 copy."""
    qc, kc, vc, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    s = qc @ kc.transpose(-2, -1) * sc
    s = s if bias is None else s + bias
    dead = torch.isneginf(s).all(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(dead, 0.0).half(), dim=-1).masked_fill(dead, 0.0)
    return (p.to(vc.dtype) @ vc).to(q.dtype)


def sdpa_scores_rounded_once(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                             enable_gqa=False):
    """Takes float32 dot products and the scale, then stores the scores in the input dtype for the softmax (one
    rounding of the scaled score, the mask added in float32 after)."""
    qc, kc, vc, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    s = (qc @ kc.transpose(-2, -1) * sc).to(q.dtype).to(qc.dtype)
    return _softmax_v(s, vc, bias).to(q.dtype)


def sdpa_scale_split_qk(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Scales q and k each by sqrt(scale) in the input dtype (to keep half-precision scores small): two roundings
    before the dot product."""
    _, _, _, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, dtype=q.dtype)
    if sc < 0:  # a negative scale cannot be split; the sign goes to q
        qs, ks = q * -math.sqrt(-sc), k * math.sqrt(-sc)
    else:
        qs, ks = q * math.sqrt(sc), k * math.sqrt(sc)
    qc, kc, vc, _, _ = sdpa_args(qs, ks, v, None, dropout_p, False, 1.0, enable_gqa)
    return _softmax_v(qc @ kc.transpose(-2, -1), vc, bias).to(q.dtype)


def sdpa_tiled_accumulator_float32(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                   enable_gqa=False):
    """A key-tiled online softmax whose running max, sum and accumulator are torch.full / torch.zeros in the default
    dtype, updated in place: a float64 run keeps its statistics in float32."""
    qc, kc, vc, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    S = kc.shape[-2]
    rows = torch.broadcast_shapes(qc.shape[:-1], kc.shape[:-2] + (qc.shape[-2],))
    if bias is not None:
        rows = torch.broadcast_shapes(rows, bias.shape[:-1])
    m = torch.full(rows, -math.inf, device=q.device)
    l = torch.zeros(rows, device=q.device)
    acc = torch.zeros(*rows, vc.shape[-1], device=q.device)
    for j0 in range(0, S, BLOCK_N):
        j1 = min(j0 + BLOCK_N, S)
        s = qc @ kc[..., j0:j1, :].transpose(-2, -1) * sc
        if bias is not None:
            s = s + (bias[..., j0:j1] if bias.shape[-1] == S else bias)
        m_new = torch.maximum(m, s.detach().amax(-1))
        shift = torch.where(torch.isneginf(m_new), 0.0, m_new)
        p = torch.exp(s - shift[..., None])
        alpha = torch.exp(m - shift)
        l.mul_(alpha).add_(p.sum(-1))
        acc.mul_(alpha[..., None]).add_(p @ vc[..., j0:j1, :])
        m.copy_(m_new)
    out = acc / torch.where(l > 0, l, 1.0)[..., None]
    return out.to(q.dtype)
