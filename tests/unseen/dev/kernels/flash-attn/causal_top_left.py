"""flash_attn_func reference in one shot: einsum scores, soft-cap, ALiBi, window/causal mask, float32 softmax."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "causal=True masks with the upper-left diagonal (query i sees keys j <= i) instead of FlashAttention's "
        "bottom-right one (j <= i + S - L), so outputs and lse are wrong whenever L != S"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    kk = k.to(f).repeat_interleave(H // Hkv, dim=2)
    vv = v.to(f).repeat_interleave(H // Hkv, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q.to(f), kk) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    i = torch.arange(L, device=q.device).view(L, 1)
    j = torch.arange(S, device=q.device).view(1, S)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(f).view(-1, H, 1, 1)
        s = s - sl * (i + S - L - j).abs().to(f)
    keep = torch.ones(L, S, dtype=torch.bool, device=q.device)
    left, right = window_size
    if left >= 0:
        keep = keep & (j >= i + S - L - left)
    if right >= 0:
        keep = keep & (j <= i + S - L + right)
    if causal:
        keep = keep & (j <= i)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
    out = torch.einsum("bhij,bjhd->bihd", p, vv).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
