"""Online-softmax flash attention over key blocks of 64 written in differentiable torch ops."""
import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "P and the V tile are cast to a hard-coded torch.bfloat16 for the P@V product and the row sum is taken from the "
        "rounded P (a leftover from a bf16-only kernel), so float32 inputs get bfloat16-level error (~1e-3 relative); the "
        "cast should be to the input dtype (or skipped) with accumulation in float32",
    ],
    "kind": "precision",
}

_BLOCK_N = 64
_MMA_DTYPE = torch.bfloat16


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    mma = acc if q.dtype == torch.float64 else _MMA_DTYPE
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    g = H // Hkv
    qh = q.to(acc).transpose(1, 2)
    kh = k.to(acc).transpose(1, 2).repeat_interleave(g, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(g, dim=1)
    qpos = torch.arange(L, device=q.device).unsqueeze(1) + (S - L)
    left, right = window_size
    if causal:
        right = 0
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(acc).reshape(-1, H, 1, 1)

    m = torch.full((B, H, L), float("-inf"), dtype=acc, device=q.device)
    l = torch.zeros((B, H, L), dtype=acc, device=q.device)
    o = torch.zeros((B, H, L, vh.size(-1)), dtype=acc, device=q.device)
    for j0 in range(0, S, _BLOCK_N):
        j1 = min(S, j0 + _BLOCK_N)
        kpos = torch.arange(j0, j1, device=q.device).unsqueeze(0)
        s = torch.matmul(qh, kh[:, :, j0:j1].transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes * (qpos - kpos).abs().to(acc)
        ok = torch.ones(L, j1 - j0, dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= kpos >= qpos - left
        if right >= 0:
            ok &= kpos <= qpos + right
        s = s.masked_fill(~ok, float("-inf"))
        m_new = torch.maximum(m, s.detach().amax(dim=-1))
        m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - m_ref)
        p = torch.exp(s - m_ref.unsqueeze(-1)).to(mma)
        l = alpha * l + p.to(acc).sum(dim=-1)
        o = alpha.unsqueeze(-1) * o + torch.matmul(p, vh[:, :, j0:j1].to(mma)).to(acc)
        m = m_new
    has_keys = l > 0
    l_div = torch.where(has_keys, l, torch.ones_like(l))
    out = (o / l_div.unsqueeze(-1)).transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        lse = torch.where(has_keys, m + torch.log(l_div), torch.full_like(l, float("-inf")))
        return out, lse.detach().float(), None
    return out
