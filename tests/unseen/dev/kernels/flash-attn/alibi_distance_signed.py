"""ALiBi-aware FlashAttention port (BLOOM / MPT style linear position bias), dense float32."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the ALiBi bias uses the signed distance -slope * (i + S - L - j) instead of -slope * |i + S - L - j|, so "
        "without causal masking keys to the right of the diagonal get a growing positive bonus"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    cd = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    kv_head = torch.arange(H, device=q.device) // (H // Hkv)
    qf = q.to(cd).permute(0, 2, 1, 3)
    kf = k.to(cd)[:, :, kv_head].permute(0, 2, 3, 1)   # B H D S
    vf = v.to(cd)[:, :, kv_head].permute(0, 2, 1, 3)   # B H S D
    s = torch.matmul(qf, kf) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    dist = (torch.arange(L, device=q.device)[:, None] + (S - L)) - torch.arange(S, device=q.device)[None, :]
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(cd)
        if slopes.dim() == 1:
            slopes = slopes.unsqueeze(0).expand(B, H)
        # linear penalty growing with the distance to the key
        s = s - slopes[:, :, None, None] * dist.to(cd)
    left, right = window_size
    if causal:
        right = 0
    mask = torch.zeros(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        mask |= dist > left
    if right >= 0:
        mask |= dist < -right
    s = s.masked_fill(mask, -math.inf)
    mx = s.amax(-1, keepdim=True).detach()
    mx = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
    ex = torch.exp(s - mx)
    tot = ex.sum(-1, keepdim=True)
    out = torch.matmul(ex, vf) / torch.where(tot > 0, tot, torch.ones_like(tot))
    lse = (mx + tot.log()).squeeze(-1)
    out = out.permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
