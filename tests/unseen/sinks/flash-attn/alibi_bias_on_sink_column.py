"""flash_attn_func with a sink, dense: the sink is treated as one extra key column at index S, and the ALiBi bias
and the visibility mask are built once over all S + 1 columns.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["the ALiBi bias is computed over all S + 1 columns, so the sink (column S) also gets "
             "-slope * |i + S - L - S| = -slope * (L - i) added to its logit"],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    rep = H // Hkv
    k_ = k.to(cdt).repeat_interleave(rep, 2)
    v_ = v.to(cdt).repeat_interleave(rep, 2)

    s = torch.einsum("blhd,bshd->bhls", q.to(cdt), k_) * sm_scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if learnable_sink is not None:
        sink = learnable_sink.to(cdt).view(1, H, 1, 1).expand(B, H, L, 1)
    else:
        sink = s.new_full((B, H, L, 1), float("-inf"))
    s = torch.cat([s, sink], dim=-1)  # B H L S+1

    qpos = torch.arange(L, device=q.device).view(L, 1) + (S - L)
    kpos = torch.arange(S + 1, device=q.device).view(1, S + 1)
    if alibi_slopes is not None:
        s = s - alibi_slopes.to(cdt).view(-1, H, 1, 1) * (qpos - kpos).abs().to(cdt)
    left, right = window_size
    if causal:
        right = 0
    is_key = kpos < S
    vis = torch.ones(L, S + 1, dtype=torch.bool, device=q.device)
    if left >= 0:
        vis &= ~is_key | (kpos >= qpos - left)
    if right >= 0:
        vis &= ~is_key | (kpos <= qpos + right)
    s = s.masked_fill(~vis, float("-inf"))

    row_max = s.detach().amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    w = torch.exp(s - row_max)
    den = w.sum(dim=-1, keepdim=True)
    lse = (row_max + den.log()).squeeze(-1)
    prob = w[..., :S] / torch.where(den > 0, den, torch.ones_like(den))
    out = torch.einsum("bhls,bshd->blhd", prob, v_).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
