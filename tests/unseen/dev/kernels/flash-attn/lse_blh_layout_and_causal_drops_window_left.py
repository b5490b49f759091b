"""FlashAttention forward with the output-shaped LSE (per token, per head), dense float32 math."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "softmax_lse is returned in the output's (B, L, H) layout instead of (B, H, L)",
        "with causal=True the window is ignored entirely (only j <= i + S - L is applied), so window_size's left "
        "bound has no effect on causal calls",
    ],
    "kind": "two",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    idx = torch.arange(H, device=q.device) // (H // Hkv)
    kk = k.to(ct).index_select(2, idx)
    vv = v.to(ct).index_select(2, idx)
    s = torch.einsum("bqhd,bkhd->bqhk", q.to(ct), kk) * scale       # B L H S
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qp = (torch.arange(L, device=q.device) + S - L).view(L, 1, 1)
    kp = torch.arange(S, device=q.device).view(1, 1, S)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        sl = sl.view(1, 1, H, 1) if sl.dim() == 1 else sl.view(B, 1, H, 1)
        s = s - sl * (qp - kp).abs().to(ct)
    if causal:
        keep = kp <= qp
    else:
        left, right = window_size
        keep = torch.ones(L, 1, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            keep = keep & (kp >= qp - left)
        if right >= 0:
            keep = keep & (kp <= qp + right)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                                # B L H
    p = torch.exp(s - torch.nan_to_num(lse, neginf=0.0).unsqueeze(-1))
    out = torch.einsum("bqhk,bkhd->bqhd", p, vv).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
