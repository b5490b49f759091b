"""Varlen flash attention with an online-softmax loop over key blocks of each sequence, writing out/lse into packed buffers."""
import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the lse is accumulated in a token-major (total_q, H) buffer and returned with .reshape(H, total_q) instead of "
        ".transpose(0, 1), which scrambles the lse values across heads and tokens (the output itself is right)",
    ],
    "kind": "semantic",
}

_BLK = 32


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    rep = H // k.shape[1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    lo, hi = window_size
    if causal:
        hi = 0
    out_buf = torch.zeros(total_q, H, v.shape[-1], dtype=acc, device=q.device)
    lse_buf = torch.full((total_q, H), float("-inf"), dtype=torch.float32, device=q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        Lq, Lk = cq[b + 1] - cq[b], ck[b + 1] - ck[b]
        if Lq == 0:
            continue
        qb = q[cq[b]:cq[b + 1]].to(acc).transpose(0, 1)
        kb = k[ck[b]:ck[b + 1]].to(acc).transpose(0, 1).repeat_interleave(rep, dim=0)
        vb = v[ck[b]:ck[b + 1]].to(acc).transpose(0, 1).repeat_interleave(rep, dim=0)
        slopes = None
        if alibi_slopes is not None:
            slopes = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).to(acc).reshape(H, 1, 1)
        qpos = torch.arange(Lq, device=q.device).view(-1, 1) + (Lk - Lq)
        m = torch.full((H, Lq), float("-inf"), dtype=acc, device=q.device)
        l = torch.zeros((H, Lq), dtype=acc, device=q.device)
        o = torch.zeros((H, Lq, vb.size(-1)), dtype=acc, device=q.device)
        for j0 in range(0, Lk, _BLK):
            j1 = min(Lk, j0 + _BLK)
            kpos = torch.arange(j0, j1, device=q.device).view(1, -1)
            s = torch.matmul(qb, kb[:, j0:j1].transpose(-1, -2)) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            if slopes is not None:
                s = s - slopes * (qpos - kpos).abs().to(acc)
            ok = torch.ones(Lq, j1 - j0, dtype=torch.bool, device=q.device)
            if lo >= 0:
                ok &= kpos >= qpos - lo
            if hi >= 0:
                ok &= kpos <= qpos + hi
            s = s.masked_fill(~ok, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            base = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            a = torch.exp(m - base)
            p = torch.exp(s - base.unsqueeze(-1))
            l = a * l + p.sum(-1)
            o = a.unsqueeze(-1) * o + torch.matmul(p, vb[:, j0:j1])
            m = m_new
        nz = l > 0
        ls = torch.where(nz, l, torch.ones_like(l))
        out_buf[cq[b]:cq[b + 1]] = (o / ls.unsqueeze(-1)).transpose(0, 1)
        lse_buf[cq[b]:cq[b + 1]] = torch.where(nz, m + torch.log(ls), torch.full_like(m, float("-inf"))).t().float()
    out = out_buf.to(q.dtype)
    if return_attn_probs:
        return out, lse_buf.reshape(H, total_q), None
    return out
