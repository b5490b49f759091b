"""Triton-tutorial-style flash_attn_func with a sink, written densely in base 2 (exp2/log2), differentiated by autograd.

Scores and the sink are both moved to base 2 with log2(e) before the row max; the returned lse is converted back to
the natural log.
"""

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [],
    "kind": "correct",
}

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p > 0 is not implemented")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    group = H // Hkv
    sm_scale = softmax_scale if softmax_scale is not None else D ** -0.5

    qh = q.to(cdt).permute(0, 2, 1, 3)  # B H L D
    kh = k.to(cdt).permute(0, 2, 1, 3)[:, torch.arange(H, device=q.device) // group]
    vh = v.to(cdt).permute(0, 2, 1, 3)[:, torch.arange(H, device=q.device) // group]

    s = torch.einsum("bhld,bhsd->bhls", qh, kh) * sm_scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    rows = torch.arange(L, device=q.device)[:, None] + (S - L)
    cols = torch.arange(S, device=q.device)[None, :]
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(cdt).reshape(-1, H, 1, 1)
        s = s - slopes * (rows - cols).abs().to(cdt)
    left, right = window_size
    if causal:
        right = 0
    hide = torch.zeros(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        hide |= cols < rows - left
    if right >= 0:
        hide |= cols > rows + right
    s2 = (s * LOG2E).masked_fill(hide, float("-inf"))

    m2 = s2.amax(dim=-1)
    if learnable_sink is not None:
        sink2 = (learnable_sink.to(cdt) * LOG2E).view(1, H, 1)
        m2 = torch.maximum(m2, sink2)
    m2 = torch.where(torch.isneginf(m2), torch.zeros_like(m2), m2).detach()
    p = torch.exp2(s2 - m2.unsqueeze(-1))
    l2 = p.sum(dim=-1)
    if learnable_sink is not None:
        l2 = l2 + torch.exp2(sink2 - m2)
    out = torch.einsum("bhls,bhsd->bhld", p, vh) / torch.where(l2 == 0, torch.ones_like(l2), l2).unsqueeze(-1)
    lse = (m2 + torch.log2(l2)) * LN2
    out = out.permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out

