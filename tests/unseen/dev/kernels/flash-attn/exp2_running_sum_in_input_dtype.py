"""exp2-based FlashAttention forward (Triton tutorial layout); the row sum l_i is kept like the P tile, in the
input dtype, while the max and the output accumulator are float32."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the running softmax denominator l_i is kept in the input dtype (bfloat16/float16) across key blocks, so "
        "for long sequences its accumulated rounding error makes the output and lse errors several times "
        "PyTorch's"
    ],
    "kind": "precision",
}

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
BLOCK_N = 16


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    kvh = torch.arange(H, device=q.device) // (H // Hkv)
    Q = q.to(f).transpose(1, 2)
    K = k.to(f)[:, :, kvh].transpose(1, 2)
    V = v.to(f)[:, :, kvh].transpose(1, 2)
    al = None
    if alibi_slopes is not None:
        al = alibi_slopes.to(f)
        al = (al if al.dim() == 2 else al.expand(B, H))[:, :, None, None]
    offs_m = torch.arange(L, device=q.device)[:, None] + S - L
    m_i = torch.full((B, H, L, 1), -math.inf, dtype=f, device=q.device)
    l_i = torch.zeros((B, H, L, 1), dtype=q.dtype, device=q.device)
    acc = torch.zeros((B, H, L, D), dtype=f, device=q.device)
    for n0 in range(0, S, BLOCK_N):
        offs_n = torch.arange(n0, min(S, n0 + BLOCK_N), device=q.device)[None, :]
        s = Q @ K[:, :, n0:n0 + BLOCK_N].transpose(-1, -2) * sm_scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if al is not None:
            s = s - al * (offs_m - offs_n).abs().to(f)
        ok = torch.ones(L, offs_n.shape[1], dtype=torch.bool, device=q.device)
        if left >= 0:
            ok = ok & (offs_n >= offs_m - left)
        if right >= 0:
            ok = ok & (offs_n <= offs_m + right)
        qk = (s * LOG2E).masked_fill(~ok, -math.inf)
        m_new = torch.maximum(m_i, qk.amax(-1, keepdim=True)).detach()
        m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp2(qk - m_use)
        alpha = torch.exp2(m_i - m_use)
        l_i = (l_i * alpha + p.sum(-1, keepdim=True)).to(q.dtype)
        acc = acc * alpha + p @ V[:, :, n0:n0 + BLOCK_N]
        m_i = m_new
    l_f = l_i.to(f)
    has = l_f > 0
    out = (acc / torch.where(has, l_f, torch.ones_like(l_f))).transpose(1, 2).to(q.dtype)
    lse = torch.where(has, (m_i + torch.log2(torch.where(has, l_f, torch.ones_like(l_f)))) * LN2,
                      torch.full_like(l_f, -math.inf)).squeeze(-1)
    if return_attn_probs:
        return out, lse, None
    return out
