"""Varlen flash attention written as one dense float32 attention per packed sequence (loop over cu_seqlens)."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        (
            "the left window bound is strict (keys j > pos - window_left are kept) so each query sees one key too"
            " few on the left; it should keep j >= pos - window_left"
        ),
        (
            "the lse buffer is initialised with zeros and sequences with no keys are skipped, so their query rows"
            " return lse 0 instead of -inf"
        ),
    ],
    "kind": "two",
}


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

    out = torch.zeros(total_q, n_heads, v.shape[-1], dtype=acc)
    lse = torch.zeros(n_heads, total_q, dtype=acc)
    cq = cu_seqlens_q.tolist()
    ck = cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1 = cq[b], cq[b + 1]
        k0, k1 = ck[b], ck[b + 1]
        len_q, len_k = q1 - q0, k1 - k0
        if len_q == 0 or len_k == 0:
            continue
        qb = q[q0:q1].to(acc).transpose(0, 1)
        kb = k[k0:k1].to(acc).transpose(0, 1).repeat_interleave(group, dim=0)
        vb = v[k0:k1].to(acc).transpose(0, 1).repeat_interleave(group, dim=0)

        s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        row = torch.arange(len_q).unsqueeze(1) + (len_k - len_q)
        col = torch.arange(len_k).unsqueeze(0)
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            s = s - slopes.to(acc).view(-1, 1, 1) * (row - col).abs().to(acc)
        keep = torch.ones(len_q, len_k, dtype=torch.bool)
        if right >= 0:
            keep &= col <= row + right
        if left >= 0:
            keep &= col > row - left
        s = s.masked_fill(~keep, -math.inf)

        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        p = torch.exp(s - m)
        denom = p.sum(dim=-1, keepdim=True)
        o = torch.matmul(p, vb) / denom.clamp_min(torch.finfo(acc).tiny)
        out[q0:q1] = o.transpose(0, 1)
        lse[:, q0:q1] = (m + torch.log(denom)).squeeze(-1)

    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
