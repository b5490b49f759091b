"""FlashAttention-2 style forward: running max and sum per row, unnormalised output, divide once at the end."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "when a new key block raises the running max, the running sum is rescaled by exp(m_old - m_new) but the "
        "output accumulator is not, so earlier blocks keep too much weight whenever S spans more than one block"
    ],
    "kind": "semantic",
}

BLOCK_N = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    wt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    left, right = window_size
    if causal:
        right = 0
    n_rep = H // Hkv
    Qh = q.to(wt).transpose(1, 2)
    Kh = k.to(wt).transpose(1, 2).repeat_interleave(n_rep, 1)
    Vh = v.to(wt).transpose(1, 2).repeat_interleave(n_rep, 1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(wt)
        slopes = (slopes.unsqueeze(0).expand(B, H) if slopes.dim() == 1 else slopes)[..., None, None]
    qpos = torch.arange(L, device=q.device)[:, None] + S - L
    m_i = torch.full((B, H, L, 1), -math.inf, dtype=wt, device=q.device)
    l_i = torch.zeros((B, H, L, 1), dtype=wt, device=q.device)
    acc = torch.zeros((B, H, L, D), dtype=wt, device=q.device)
    for j0 in range(0, S, BLOCK_N):
        kpos = torch.arange(j0, min(S, j0 + BLOCK_N), device=q.device)[None, :]
        s = (Qh @ Kh[:, :, j0:j0 + BLOCK_N].transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes * (qpos - kpos).abs().to(wt)
        keep = torch.ones(L, kpos.shape[1], dtype=torch.bool, device=q.device)
        if left >= 0:
            keep &= kpos >= qpos - left
        if right >= 0:
            keep &= kpos <= qpos + right
        s = s.masked_fill(~keep, -math.inf)
        m_new = torch.maximum(m_i, s.amax(-1, keepdim=True)).detach()
        m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - m_ref)
        l_i = l_i * torch.exp(m_i - m_ref) + p.sum(-1, keepdim=True)
        acc = acc + p @ Vh[:, :, j0:j0 + BLOCK_N]
        m_i = m_new
    has = l_i > 0
    out = acc / torch.where(has, l_i, torch.ones_like(l_i))
    lse = torch.where(has, m_i + torch.log(l_i), torch.full_like(l_i, -math.inf)).squeeze(-1)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
