"""exp2 flash_attn_func (Triton tutorial layout): log2(e) folded into the scale, statistics kept in base 2.

The window is applied as a left bound on the key index; causal caps the right side at the diagonal.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "softmax_lse is returned as m_i + log2(l_i), i.e. in base 2 (log2 of the sum), without dividing by log2(e) "
        "to convert it to the natural-log lse",
        "the right side of window_size is never applied (only causal limits the right), so with causal=False and "
        "window_size=(left, right >= 0) keys after i + S - L + right stay visible",
    ],
    "kind": "two",
}

LOG2E = 1.4426950408889634
BLOCK_N = 16


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    at = torch.float64 if q.dtype == torch.float64 else torch.float32
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qt = q.to(at).transpose(1, 2)
    kt = k.to(at).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    vt = v.to(at).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    offs_m = torch.arange(L, device=q.device)[:, None] + (S - L)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(at)
        sl = (sl[None, :] if sl.dim() == 1 else sl)[:, :, None, None]
    left = window_size[0]

    m_i = torch.full((B, H, L), -math.inf, dtype=at, device=q.device)
    l_i = torch.zeros((B, H, L), dtype=at, device=q.device)
    acc = torch.zeros((B, H, L, vt.shape[-1]), dtype=at, device=q.device)
    for start_n in range(0, S, BLOCK_N):
        offs_n = torch.arange(start_n, min(start_n + BLOCK_N, S), device=q.device)[None, :]
        qk = qt @ kt[:, :, start_n:start_n + BLOCK_N].transpose(-1, -2) * sm_scale
        if softcap > 0.0:
            qk = softcap * torch.tanh(qk / softcap)
        if alibi_slopes is not None:
            qk = qk - sl * (offs_m - offs_n).abs()
        qk = qk * LOG2E
        keep = torch.ones(L, offs_n.shape[1], dtype=torch.bool, device=q.device)
        if causal:
            keep &= offs_n <= offs_m
        if left >= 0:
            keep &= offs_n >= offs_m - left
        qk = qk.masked_fill(~keep, -math.inf)
        m_ij = torch.maximum(m_i, qk.amax(-1)).detach()
        m_use = torch.where(torch.isinf(m_ij), torch.zeros_like(m_ij), m_ij)
        p = torch.exp2(qk - m_use[..., None])
        alpha = torch.exp2(m_i - m_use)
        l_i = l_i * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + p @ vt[:, :, start_n:start_n + BLOCK_N]
        m_i = m_ij
    out = acc / torch.where(l_i == 0, torch.ones_like(l_i), l_i)[..., None]
    out = out.transpose(1, 2).to(q.dtype)
    if not return_attn_probs:
        return out
    m_fin = torch.where(torch.isinf(m_i), torch.zeros_like(m_i), m_i)
    return out, m_fin + torch.log2(l_i), None
