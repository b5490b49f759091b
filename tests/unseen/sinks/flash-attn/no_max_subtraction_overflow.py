"""flash_attn_func with a learnable sink in its most direct form: w_ij = exp(s_ij), w_sink = exp(sink),
out = sum_j w_ij v_j / (w_sink + sum_j w_ij), lse = log(w_sink + sum_j w_ij); autograd does the rest.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["the softmax exponentiates the raw scores and sink with no max subtraction, so in float32/bfloat16 a "
             "score or sink above ~88 overflows to inf, giving that row an inf lse and NaN (or zeroed) output and "
             "gradients"],
    "kind": "precision",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    g = H // Hkv
    qq = q.to(cdt)
    kk = k.to(cdt)[:, :, torch.arange(H, device=q.device) // g]
    vv = v.to(cdt)[:, :, torch.arange(H, device=q.device) // g]
    s = torch.einsum("bihd,bjhd->bhij", qq, kk) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L, device=q.device).view(L, 1) + S - L
    j = torch.arange(S, device=q.device).view(1, S)
    if alibi_slopes is not None:
        s = s - alibi_slopes.to(cdt).view(-1, H, 1, 1) * (i - j).abs()
    left, right = window_size
    if causal:
        right = 0
    keep = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    w = torch.exp(s) * keep
    denom = w.sum(-1)
    if learnable_sink is not None:
        denom = denom + torch.exp(learnable_sink.to(cdt)).view(1, H, 1)
    empty = denom == 0
    denom = torch.where(empty, torch.ones_like(denom), denom)
    out = torch.einsum("bhij,bjhd->bihd", w / denom.unsqueeze(-1), vv)
    lse = torch.log(denom).masked_fill(empty, float("-inf"))
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
