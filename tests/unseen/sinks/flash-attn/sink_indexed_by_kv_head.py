"""flash_attn_func with learnable sinks, written the way the CUDA kernel schedules GQA: one program per (batch, kv head)
handles the whole group of query heads that share it, with a key-block online softmax seeded by the sink.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["the sink is read with the kv-head index (learnable_sink[kv_head]) instead of the query head, so with GQA "
             "every query head of group g uses sink[g] and query heads h >= Hkv never use their own sink"],
    "kind": "semantic",
}

BLOCK_N = 16


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p must be 0")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    G = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    rows = torch.arange(L, device=q.device).view(1, L, 1) + (S - L)
    outs, lses = [], []
    for kvh in range(Hkv):
        heads = slice(kvh * G, (kvh + 1) * G)
        qg = q[:, :, heads].to(cdt).permute(0, 2, 1, 3)  # B G L D
        kh = k[:, :, kvh].to(cdt)  # B S D
        vh = v[:, :, kvh].to(cdt)
        if learnable_sink is not None:
            m = learnable_sink[kvh].to(cdt).expand(B, G, L)
            l_sum = torch.ones(B, G, L, dtype=cdt, device=q.device)
        else:
            m = torch.full((B, G, L), float("-inf"), dtype=cdt, device=q.device)
            l_sum = torch.zeros(B, G, L, dtype=cdt, device=q.device)
        acc = torch.zeros(B, G, L, D, dtype=cdt, device=q.device)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(S, j0 + BLOCK_N)
            s = torch.einsum("bgld,bsd->bgls", qg, kh[:, j0:j1]) * scale
            if softcap > 0.0:
                s = softcap * torch.tanh(s / softcap)
            cols = torch.arange(j0, j1, device=q.device).view(1, 1, -1)
            if alibi_slopes is not None:
                sl = alibi_slopes.to(cdt).reshape(-1, H)[:, heads].reshape(-1, G, 1, 1)
                s = s - sl * (rows - cols).abs()
            ok = torch.ones_like(s, dtype=torch.bool)
            if left >= 0:
                ok = ok & (cols >= rows - left)
            if right >= 0:
                ok = ok & (cols <= rows + right)
            s = s.masked_fill(~ok, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            m_fix = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_fix)
            p = torch.exp(s - m_fix.unsqueeze(-1))
            l_sum = alpha * l_sum + p.sum(-1)
            acc = alpha.unsqueeze(-1) * acc + torch.einsum("bgls,bsd->bgld", p, vh[:, j0:j1])
            m = m_new
        outs.append(acc / torch.where(l_sum == 0, torch.ones_like(l_sum), l_sum).unsqueeze(-1))
        lses.append(m + torch.log(l_sum))
    out = torch.cat(outs, dim=1).permute(0, 2, 1, 3).to(q.dtype)
    lse = torch.cat(lses, dim=1)
    if return_attn_probs:
        return out, lse, None
    return out
