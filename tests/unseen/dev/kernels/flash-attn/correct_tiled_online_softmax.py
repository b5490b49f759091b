"""FlashAttention-2 forward in PyTorch: key tiles of 32, running max / running sum, float32 statistics."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [],
    "kind": "correct",
}

BLOCK_N = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    g = H // Hkv
    qf = q.to(acc).transpose(1, 2)                                   # B H L D
    kf = k.to(acc).transpose(1, 2).repeat_interleave(g, dim=1)       # B H S D
    vf = v.to(acc).transpose(1, 2).repeat_interleave(g, dim=1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(acc)
        slopes = slopes.expand(B, H) if slopes.dim() == 1 else slopes
        slopes = slopes[:, :, None, None]

    rows = torch.arange(L, device=q.device)[:, None] + (S - L)       # diagonal position of each query
    m_i = torch.full((B, H, L, 1), float("-inf"), dtype=acc, device=q.device)
    l_i = torch.zeros((B, H, L, 1), dtype=acc, device=q.device)
    o_i = torch.zeros((B, H, L, vf.shape[-1]), dtype=acc, device=q.device)
    for n0 in range(0, S, BLOCK_N):
        n1 = min(S, n0 + BLOCK_N)
        cols = torch.arange(n0, n1, device=q.device)[None, :]
        s = qf @ kf[:, :, n0:n1].transpose(-1, -2) * scale
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes * (rows - cols).abs().to(acc)
        ok = torch.ones(L, n1 - n0, dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= cols >= rows - left
        if right >= 0:
            ok &= cols <= rows + right
        s = s.masked_fill(~ok, float("-inf"))
        m_new = torch.maximum(m_i, s.amax(-1, keepdim=True)).detach()
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m_i - m_safe)
        p = torch.exp(s - m_safe)
        l_i = l_i * alpha + p.sum(-1, keepdim=True)
        o_i = o_i * alpha + p @ vf[:, :, n0:n1]
        m_i = m_new
    empty = l_i == 0
    out = o_i / torch.where(empty, torch.ones_like(l_i), l_i)
    lse = torch.where(empty, torch.full_like(l_i, float("-inf")), m_i + torch.log(l_i))
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        return out, lse.squeeze(-1).to(lse_dtype), None
    return out
