"""Per-sequence varlen attention with an online softmax over key chunks of 32 (float32 statistics).

Empty sequences (padding slots in the batch) have nothing to compute and end the work early.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "a sequence with 0 queries or 0 keys ends the loop (break instead of continue), so every sequence after an "
        "empty one is never computed and keeps zero output and -inf lse"
    ],
    "kind": "semantic",
}

CHUNK = 32


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    _, H, D = q.shape
    Hkv = k.shape[1]
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.zeros(q.shape[0], H, v.shape[-1], dtype=dt, device=q.device)
    lse = torch.full((H, q.shape[0]), -math.inf, dtype=dt, device=q.device)
    left, right = window_size
    if causal:
        right = 0
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        L, S = cq[b + 1] - cq[b], ck[b + 1] - ck[b]
        if L == 0 or S == 0:
            break
        qb = q[cq[b]:cq[b + 1]].to(dt).permute(1, 0, 2)
        kb = k[ck[b]:ck[b + 1]].to(dt).permute(1, 0, 2).repeat_interleave(H // Hkv, 0)
        vb = v[ck[b]:ck[b + 1]].to(dt).permute(1, 0, 2).repeat_interleave(H // Hkv, 0)
        sl = None
        if alibi_slopes is not None:
            sl = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).to(dt)[:, None, None]
        qpos = torch.arange(L, device=q.device)[:, None] + S - L
        m = torch.full((H, L, 1), -math.inf, dtype=dt, device=q.device)
        den = torch.zeros((H, L, 1), dtype=dt, device=q.device)
        acc = torch.zeros((H, L, vb.shape[-1]), dtype=dt, device=q.device)
        for c0 in range(0, S, CHUNK):
            c1 = min(S, c0 + CHUNK)
            s = qb @ kb[:, c0:c1].transpose(-1, -2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kpos = torch.arange(c0, c1, device=q.device)[None, :]
            if sl is not None:
                s = s - sl * (qpos - kpos).abs()
            ok = torch.ones(L, c1 - c0, dtype=torch.bool, device=q.device)
            if left >= 0:
                ok &= kpos >= qpos - left
            if right >= 0:
                ok &= kpos <= qpos + right
            s = s.masked_fill(~ok, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            a = torch.exp(m - m_ref)
            p = torch.exp(s - m_ref)
            den = den * a + p.sum(-1, keepdim=True)
            acc = acc * a + p @ vb[:, c0:c1]
            m = m_new
        out[cq[b]:cq[b + 1]] = (acc / torch.where(den > 0, den, torch.ones_like(den))).permute(1, 0, 2)
        m_fin = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        lse[:, cq[b]:cq[b + 1]] = (m_fin + den.log()).squeeze(-1)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
