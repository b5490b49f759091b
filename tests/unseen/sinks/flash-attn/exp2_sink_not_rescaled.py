"""flash_attn_func with a learnable sink, ported from Triton's fused-attention tutorial: scores are pre-multiplied by
sm_scale * log2(e) so the inner loop can use exp2, the running max m_i starts at the sink and l_i at 1.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["the running max is seeded with the raw sink while the scores are in base-2 units (multiplied by "
             "log2(e)), so the sink acts as sink * ln(2) instead of sink in out, lse and dsink"],
    "kind": "semantic",
}

BLOCK_N = 32
LOG2E = 1.4426950408889634


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    Z, N_CTX_Q, H, HEAD_DIM = q.shape
    N_CTX_K, H_KV = k.shape[1], k.shape[2]
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(HEAD_DIM)
    qk_scale = sm_scale * LOG2E
    q_ = q.to(cdt).permute(0, 2, 1, 3)
    k_ = k.to(cdt).permute(0, 2, 1, 3).repeat_interleave(H // H_KV, dim=1)
    v_ = v.to(cdt).permute(0, 2, 1, 3).repeat_interleave(H // H_KV, dim=1)
    left, right = window_size
    if causal:
        right = 0
    offs_m = torch.arange(N_CTX_Q, device=q.device)[:, None] + (N_CTX_K - N_CTX_Q)

    if learnable_sink is not None:
        m_i = learnable_sink.to(cdt).view(1, H, 1).expand(Z, H, N_CTX_Q)
        l_i = torch.ones(Z, H, N_CTX_Q, dtype=cdt, device=q.device)
    else:
        m_i = torch.full((Z, H, N_CTX_Q), float("-inf"), dtype=cdt, device=q.device)
        l_i = torch.zeros(Z, H, N_CTX_Q, dtype=cdt, device=q.device)
    acc = torch.zeros(Z, H, N_CTX_Q, v.shape[-1], dtype=cdt, device=q.device)
    for start_n in range(0, N_CTX_K, BLOCK_N):
        offs_n = torch.arange(start_n, min(start_n + BLOCK_N, N_CTX_K), device=q.device)[None, :]
        qk = q_ @ k_[:, :, offs_n[0]].transpose(-1, -2)
        qk = softcap * torch.tanh(qk * sm_scale / softcap) * LOG2E if softcap > 0.0 else qk * qk_scale
        if alibi_slopes is not None:
            qk = qk - alibi_slopes.to(cdt).view(-1, H, 1, 1) * LOG2E * (offs_m - offs_n).abs()
        mask = torch.zeros(N_CTX_Q, offs_n.shape[1], dtype=torch.bool, device=q.device)
        if left >= 0:
            mask |= offs_n < offs_m - left
        if right >= 0:
            mask |= offs_n > offs_m + right
        qk = qk.masked_fill(mask, float("-inf"))
        m_ij = torch.maximum(m_i, qk.amax(-1))
        m_ij_safe = torch.where(torch.isneginf(m_ij), torch.zeros_like(m_ij), m_ij)
        p = torch.exp2(qk - m_ij_safe.unsqueeze(-1))
        alpha = torch.exp2(m_i - m_ij_safe)
        l_i = l_i * alpha + p.sum(-1)
        acc = acc * alpha.unsqueeze(-1) + p @ v_[:, :, offs_n[0]]
        m_i = m_ij
    out = acc / torch.where(l_i == 0, torch.ones_like(l_i), l_i).unsqueeze(-1)
    lse = (m_i + torch.log2(l_i)) / LOG2E
    out = out.permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
