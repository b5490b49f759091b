"""Varlen flash attention with a FlashAttention-style online softmax over key blocks of BLOCK_N per sequence.
bf16, 2 seqs x 1024 keys, H=8, Hkv=2, D=64: max|lse err| 4.5e-2 vs 6.1e-7, max|out err| 3.6e-3 vs 9.7e-4 (float32)."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        (
            "the running row max and row sum are kept in the input dtype (rounded to bfloat16 after every key "
            "block for bfloat16 inputs), so the normaliser and the returned lse carry bfloat16 rounding; they "
            "should be float32"
        ),
    ],
    "kind": "precision",
}

BLOCK_N = 64


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
    total_q, n_heads, head_dim = q.shape
    n_kv_heads = k.shape[1]
    group = n_heads // n_kv_heads
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0

    out = torch.zeros(total_q, n_heads, v.shape[-1], dtype=q.dtype)
    lse = torch.full((n_heads, total_q), -math.inf, dtype=acc)
    cq = cu_seqlens_q.tolist()
    ck = cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1 = cq[b], cq[b + 1]
        k0, k1 = ck[b], ck[b + 1]
        len_q, len_k = q1 - q0, k1 - k0
        if len_q == 0:
            continue
        qb = q[q0:q1].to(acc).transpose(0, 1)
        row = torch.arange(len_q).unsqueeze(1) + (len_k - len_q)
        slopes = None
        if alibi_slopes is not None:
            slopes = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).to(acc).view(-1, 1, 1)

        m_i = torch.full((n_heads, len_q, 1), -math.inf, dtype=q.dtype)
        l_i = torch.zeros(n_heads, len_q, 1, dtype=q.dtype)
        o_i = torch.zeros(n_heads, len_q, v.shape[-1], dtype=acc)
        for start in range(0, len_k, BLOCK_N):
            stop = min(start + BLOCK_N, len_k)
            kb = k[k0 + start:k0 + stop].to(acc).transpose(0, 1).repeat_interleave(group, dim=0)
            vb = v[k0 + start:k0 + stop].to(acc).transpose(0, 1).repeat_interleave(group, dim=0)
            s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
            if softcap > 0.0:
                s = softcap * torch.tanh(s / softcap)
            col = torch.arange(start, stop).unsqueeze(0)
            if slopes is not None:
                s = s - slopes * (row - col).abs().to(acc)
            keep = torch.ones(len_q, stop - start, dtype=torch.bool)
            if right >= 0:
                keep &= col <= row + right
            if left >= 0:
                keep &= col >= row - left
            s = s.masked_fill(~keep, -math.inf)

            m_new = torch.maximum(m_i, s.amax(dim=-1, keepdim=True))
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m_i - m_safe)
            p = torch.exp(s - m_safe)
            l_i = (l_i * alpha + p.sum(dim=-1, keepdim=True)).to(q.dtype)
            o_i = o_i * alpha + torch.matmul(p, vb)
            m_i = m_new.to(q.dtype)

        o = o_i / l_i.clamp_min(torch.finfo(acc).tiny)
        out[q0:q1] = o.transpose(0, 1).to(q.dtype)
        m_fin = torch.where(torch.isinf(m_i), torch.zeros_like(m_i), m_i)
        lse[:, q0:q1] = (m_fin + torch.log(l_i)).squeeze(-1)

    if return_attn_probs:
        return out, lse, None
    return out
