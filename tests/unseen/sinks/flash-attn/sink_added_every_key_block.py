"""flash_attn_func with a learnable sink, FlashAttention-2 forward loop: for each key block update the running max,
rescale the running sum and accumulator, and add the block's probabilities plus the sink's.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["exp(sink - m_new) is added to the running sum inside the key-block loop, so the sink is counted once per "
             "block of 32 keys (twice or more when S > 32) instead of once"],
    "kind": "semantic",
}

BLOCK_N = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    qh = q.to(acc_t).permute(0, 2, 1, 3)
    head_map = torch.arange(H, device=q.device) // (H // Hkv)
    kh = k.to(acc_t).permute(0, 2, 1, 3)[:, head_map]
    vh = v.to(acc_t).permute(0, 2, 1, 3)[:, head_map]
    diag = torch.arange(L, device=q.device).view(L, 1) + S - L
    sink = None
    if learnable_sink is not None:
        sink = learnable_sink.to(acc_t).view(1, H, 1)

    m = torch.full((B, H, L), float("-inf"), dtype=acc_t, device=q.device)
    if sink is not None:
        m = torch.maximum(m, sink)
    l_sum = torch.zeros(B, H, L, dtype=acc_t, device=q.device)
    o = torch.zeros(B, H, L, D, dtype=acc_t, device=q.device)
    for n0 in range(0, S, BLOCK_N):
        n1 = min(S, n0 + BLOCK_N)
        s = torch.matmul(qh, kh[:, :, n0:n1].transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        cols = torch.arange(n0, n1, device=q.device).view(1, -1)
        if alibi_slopes is not None:
            s = s - alibi_slopes.to(acc_t).view(-1, H, 1, 1) * (diag - cols).abs()
        keep = torch.ones(L, n1 - n0, dtype=torch.bool, device=q.device)
        if left >= 0:
            keep = keep & (cols >= diag - left)
        if right >= 0:
            keep = keep & (cols <= diag + right)
        s = s.masked_fill(~keep, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - m_use.unsqueeze(-1))
        corr = torch.exp(m - m_use)
        l_sum = l_sum * corr + p.sum(-1)
        if sink is not None:
            l_sum = l_sum + torch.exp(sink - m_use)
        o = o * corr.unsqueeze(-1) + torch.matmul(p, vh[:, :, n0:n1])
        m = m_new
    if sink is not None and S == 0:
        l_sum = torch.ones_like(l_sum)
    out = o / torch.where(l_sum == 0, torch.ones_like(l_sum), l_sum).unsqueeze(-1)
    lse = m + torch.log(l_sum)
    out = out.permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
