import math

import torch

TRUTH = {"api": "flash-attn-varlen", "bugs": ["The bottom-right offset of each sequence is computed from the batch maxima (max_seqlen_k - max_seqlen_q) instead of that sequence's own lengths (seqlen_k_b - seqlen_q_b), so causal masks, windows and ALiBi distances are shifted for every sequence whose length difference differs from the maxima's."], "kind": "semantic"}

BLOCK_M = 32
BLOCK_N = 64


def _attend_tile(qt, ks, vs, pos, lo, hi, scale, softcap, slopes, left, right, acc_t):
    """Online softmax of one query tile (H, M, D) over keys [lo, hi) of its sequence."""
    H, M, _ = qt.shape
    m_i = torch.full((H, M), -math.inf, dtype=acc_t, device=qt.device)
    l_i = torch.zeros(H, M, dtype=acc_t, device=qt.device)
    acc = torch.zeros(H, M, vs.shape[-1], dtype=acc_t, device=qt.device)
    for n0 in range(lo, hi, BLOCK_N):
        n1 = min(n0 + BLOCK_N, hi)
        cols = torch.arange(n0, n1, device=qt.device)
        s = torch.einsum("hmd,hnd->hmn", qt, ks[:, n0:n1]) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        dist = pos[:, None] - cols[None, :]
        if slopes is not None:
            s = s - slopes[:, None, None] * dist.abs().to(acc_t)
        bad = torch.zeros_like(dist, dtype=torch.bool)
        if left >= 0:
            bad |= dist > left
        if right >= 0:
            bad |= -dist > right
        s = s.masked_fill(bad, -math.inf)
        m_new = torch.maximum(m_i, s.amax(-1))
        m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p = torch.exp(s - m_safe[..., None])
        corr = torch.exp(m_i - m_safe)
        l_i = l_i * corr + p.sum(-1)
        acc = acc * corr[..., None] + torch.einsum("hmn,hnd->hmd", p, vs[:, n0:n1])
        m_i = m_new
    return acc, m_i, l_i


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    group = H // Hkv
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        right = 0
    kv_head = torch.arange(H, device=q.device) // group
    out = torch.zeros(total_q, H, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((H, total_q), -math.inf, dtype=torch.float32, device=q.device)
    cu_q = cu_seqlens_q.tolist()
    cu_k = cu_seqlens_k.tolist()
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        seq_q, seq_k = q1 - q0, k1 - k0
        if seq_q == 0:
            continue
        offset = max_seqlen_k - max_seqlen_q
        slopes = None
        if alibi_slopes is not None:
            sl = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            slopes = sl.to(acc_t)
        qs = q[q0:q1].transpose(0, 1).to(acc_t)
        ks = k[k0:k1].transpose(0, 1)[kv_head].to(acc_t)
        vs = v[k0:k1].transpose(0, 1)[kv_head].to(acc_t)
        for m0 in range(0, seq_q, BLOCK_M):
            m1 = min(m0 + BLOCK_M, seq_q)
            pos = torch.arange(m0, m1, device=q.device) + offset
            lo = 0 if left < 0 else min(seq_k, max(0, m0 + offset - left))
            hi = seq_k if right < 0 else max(0, min(seq_k, m1 - 1 + offset + right + 1))
            acc, m_i, l_i = _attend_tile(qs[:, m0:m1], ks, vs, pos, lo, max(lo, hi), scale, softcap, slopes,
                                         left, right, acc_t)
            seen = l_i > 0
            l_div = torch.where(seen, l_i, torch.ones_like(l_i))
            out[q0 + m0:q0 + m1] = (acc / l_div[..., None]).transpose(0, 1).to(q.dtype)
            lse[:, q0 + m0:q0 + m1] = torch.where(seen, m_i + torch.log(l_div), torch.full_like(m_i, -math.inf)).float()
    if return_attn_probs:
        return out, lse, None
    return out
