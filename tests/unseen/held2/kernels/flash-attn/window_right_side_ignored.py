"""Dense flash-attention forward: one additive bias (ALiBi + -inf for masked keys) built from index grids and
added to the soft-capped scores, einsum products, float32 statistics."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the local window only applies its left bound (j >= i + Sk - Lq - left); window_size[1] is never used, so "
        "non-causal local attention also sees every key to the right of i + Sk - Lq + right"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p must be 0")
    odt = q.dtype
    cdt = torch.float64 if odt == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    rep = H // Hk

    kk = k.to(cdt).repeat_interleave(rep, dim=2) if rep > 1 else k.to(cdt)
    vv = v.to(cdt).repeat_interleave(rep, dim=2) if rep > 1 else v.to(cdt)
    s = torch.einsum("blhd,bshd->bhls", q.to(cdt), kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)

    diag_pos = torch.arange(Lq, device=q.device)[:, None] + Sk - Lq
    key_pos = torch.arange(Sk, device=q.device)[None, :]
    dist = diag_pos - key_pos
    bias = torch.zeros(Lq, Sk, dtype=cdt, device=q.device)
    if causal:
        bias = bias.masked_fill(dist < 0, float("-inf"))
    if window_size[0] >= 0:
        bias = bias.masked_fill(dist > window_size[0], float("-inf"))
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cdt).reshape(-1, H, 1, 1)
        bias = bias - sl * dist.abs().to(cdt)
    s = s + bias

    mrow = s.amax(-1, keepdim=True).detach()
    mrow = torch.where(torch.isfinite(mrow), mrow, torch.zeros_like(mrow))
    p = torch.exp(s - mrow)
    den = p.sum(-1, keepdim=True)
    ok = den > 0
    out = torch.einsum("bhls,bshd->blhd", p / torch.where(ok, den, torch.ones_like(den)), vv)
    lse = torch.where(ok, mrow + torch.log(torch.where(ok, den, torch.ones_like(den))), float("-inf")).squeeze(-1)
    if return_attn_probs:
        return out.to(odt), lse.detach(), None
    return out.to(odt)
