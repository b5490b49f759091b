"""FlashAttention-1 style varlen forward: the running output is kept normalised in the out buffer between key chunks.

Per sequence and key chunk of 32: m and l are updated in float32 and out_b is rescaled by l_old * alpha / l_new
before the chunk's P @ V / l_new is added, exactly as in Algorithm 1 of the FlashAttention paper.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the normalised running output lives in the returned out tensor (q's dtype) between key chunks, so in "
        "bfloat16/float16 it is rounded after every 32-key chunk and long sequences accumulate errors many times "
        "PyTorch's"
    ],
    "kind": "precision",
}

CHUNK = 32


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    st = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.zeros(total_q, H, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((H, total_q), -math.inf, dtype=st, device=q.device)
    left, right = window_size
    if causal:
        right = 0
    for b in range(cu_seqlens_q.numel() - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        L, S = q1 - q0, k1 - k0
        if L == 0 or S == 0:
            continue
        qb = q[q0:q1].to(st).transpose(0, 1)                                        # (H, L, D)
        kb = k[k0:k1].to(st).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        vb = v[k0:k1].to(st).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        slope = None
        if alibi_slopes is not None:
            slope = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).to(st)[:, None, None]
        qpos = torch.arange(L, device=q.device)[:, None] + S - L
        m = torch.full((H, L, 1), -math.inf, dtype=st, device=q.device)
        l_sum = torch.zeros((H, L, 1), dtype=st, device=q.device)
        for c0 in range(0, S, CHUNK):
            c1 = min(S, c0 + CHUNK)
            kpos = torch.arange(c0, c1, device=q.device)[None, :]
            s = qb @ kb[:, c0:c1].transpose(1, 2) * scale
            if softcap > 0.0:
                s = softcap * torch.tanh(s / softcap)
            if slope is not None:
                s = s - slope * (qpos - kpos).abs()
            ok = torch.ones(L, c1 - c0, dtype=torch.bool, device=q.device)
            if left >= 0:
                ok &= kpos >= qpos - left
            if right >= 0:
                ok &= kpos <= qpos + right
            s = s.masked_fill(~ok, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_ref)
            p = torch.exp(s - m_ref)
            l_new = l_sum * alpha + p.sum(-1, keepdim=True)
            l_div = torch.where(l_new > 0, l_new, torch.ones_like(l_new))
            o_prev = out[q0:q1].transpose(0, 1).to(st)
            o_new = o_prev * (l_sum * alpha / l_div) + (p @ vb[:, c0:c1]) / l_div
            out[q0:q1] = o_new.transpose(0, 1).to(out.dtype)
            m, l_sum = m_new, l_new
        m_fin = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        lse[:, q0:q1] = (m_fin + torch.log(l_sum)).squeeze(-1)
    if return_attn_probs:
        return out, lse, None
    return out
