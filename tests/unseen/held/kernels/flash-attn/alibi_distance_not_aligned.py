"""Dense flash_attn_func with ALiBi: the bias is built once as a (L, S) distance grid and scaled per head.

Causal/window use the bottom-right diagonal; softmax in float32 with a guarded log-sum-exp.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the ALiBi distance is |i - j| with the query index i taken from 0 (top-left) instead of |i + S - L - j|, "
        "so whenever L != S every ALiBi bias is computed from the wrong distance"
    ],
    "kind": "semantic",
}


def _alibi_grid(L, S, device, dtype):
    i = torch.arange(L, device=device, dtype=dtype)[:, None]
    j = torch.arange(S, device=device, dtype=dtype)[None, :]
    return -(i - j).abs()


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    qf = q.to(ct).transpose(1, 2)
    kf = k.to(ct).transpose(1, 2)
    vf = v.to(ct).transpose(1, 2)
    if Hkv != H:
        kf = kf.repeat_interleave(H // Hkv, dim=1)
        vf = vf.repeat_interleave(H // Hkv, dim=1)
    scores = qf @ kf.transpose(-2, -1) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(ct).view(-1, H, 1, 1)
        scores = scores + slopes * _alibi_grid(L, S, q.device, ct)
    i = torch.arange(L, device=q.device)[:, None] + S - L
    j = torch.arange(S, device=q.device)[None, :]
    lo, hi = window_size
    if causal:
        hi = 0
    allowed = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if lo >= 0:
        allowed &= j >= i - lo
    if hi >= 0:
        allowed &= j <= i + hi
    scores = scores.masked_fill(~allowed, -math.inf)
    lse = scores.logsumexp(-1, keepdim=True)
    safe = lse.masked_fill(torch.isinf(lse), 0.0)
    out = (scores - safe).exp() @ vf
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse.squeeze(-1), None
    return out
