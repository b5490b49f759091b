"""Port of the Triton fused-attention tutorial forward to PyTorch: exp2 online softmax over BLOCK_N = 32 key tiles.

m_i and l_i are float32 as in the tutorial; P is cast to V's dtype before the P @ V dot like tl.dot does.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the output accumulator acc is kept in V's dtype (acc = acc * alpha + p.to(v.dtype) @ v stored back in "
        "bfloat16/float16), so it is rounded after every key tile and the long-sequence output error grows far "
        "beyond one rounding"
    ],
    "kind": "precision",
}

LOG2E = 1.4426950408889634
BLOCK_N = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    st = torch.float64 if q.dtype == torch.float64 else torch.float32
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    qt = q.transpose(1, 2)
    kt = k.transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    vt = v.transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    offs_m = torch.arange(L, device=q.device)[:, None] + (S - L)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(st)
        sl = (sl[None, :] if sl.dim() == 1 else sl)[:, :, None, None]

    m_i = torch.full((B, H, L), -math.inf, dtype=st, device=q.device)
    l_i = torch.zeros((B, H, L), dtype=st, device=q.device)
    acc = torch.zeros((B, H, L, vt.shape[-1]), dtype=v.dtype, device=q.device)
    for start_n in range(0, S, BLOCK_N):
        offs_n = torch.arange(start_n, min(start_n + BLOCK_N, S), device=q.device)[None, :]
        qk = (qt.to(st) @ kt[:, :, start_n:start_n + BLOCK_N].to(st).transpose(-1, -2)) * sm_scale
        if softcap > 0.0:
            qk = softcap * torch.tanh(qk / softcap)
        if alibi_slopes is not None:
            qk = qk - sl * (offs_m - offs_n).abs()
        keep = torch.ones(L, offs_n.shape[1], dtype=torch.bool, device=q.device)
        if left >= 0:
            keep &= offs_n >= offs_m - left
        if right >= 0:
            keep &= offs_n <= offs_m + right
        qk = qk.masked_fill(~keep, -math.inf) * LOG2E
        m_ij = torch.maximum(m_i, qk.amax(-1)).detach()
        m_use = torch.where(torch.isinf(m_ij), torch.zeros_like(m_ij), m_ij)
        p = torch.exp2(qk - m_use[..., None])
        alpha = torch.exp2(m_i - m_use)
        l_i = l_i * alpha + p.sum(-1)
        acc = acc * alpha[..., None].to(acc.dtype) + p.to(v.dtype) @ vt[:, :, start_n:start_n + BLOCK_N]
        m_i = m_ij
    out = acc.to(st) / torch.where(l_i == 0, torch.ones_like(l_i), l_i)[..., None]
    out = out.transpose(1, 2).to(q.dtype)
    if not return_attn_probs:
        return out
    m_fin = torch.where(torch.isinf(m_i), torch.zeros_like(m_i), m_i)
    return out, (m_fin + torch.log2(l_i)) / LOG2E, None
