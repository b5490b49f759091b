"""Dense flash_attn_func reference used in our unit tests: one (B, H, L, S) score tensor, masks as boolean grids.

The window is placed on the bottom-right diagonal; causal is folded in as a separate triangular mask.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "causal=True masks with torch.triu(ones(L, S), 1), i.e. query i sees keys j <= i (top-left alignment), "
        "instead of the bottom-right j <= i + S - L, so with L != S causal rows see the wrong keys"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale or 1.0 / math.sqrt(D)
    g = H // Hkv
    kk = k.to(ft).repeat_interleave(g, dim=2)
    vv = v.to(ft).repeat_interleave(g, dim=2)
    s = torch.einsum("blhd,bshd->bhls", q.to(ft), kk) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    row = torch.arange(L, device=q.device).view(L, 1)
    col = torch.arange(S, device=q.device).view(1, S)
    diag = row + S - L
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ft)
        sl = sl.view(1, H, 1, 1) if sl.dim() == 1 else sl.view(B, H, 1, 1)
        s = s - sl * (diag - col).abs()
    masked = torch.zeros(L, S, dtype=torch.bool, device=q.device)
    left, right = window_size
    if left >= 0:
        masked |= col < diag - left
    if right >= 0:
        masked |= col > diag + right
    if causal:
        masked |= torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1)
    s = s.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
    out = torch.einsum("bhls,bshd->blhd", p, vv).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
