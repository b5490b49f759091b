"""Varlen forward with MQA/GQA support, per-sequence loop, float32 softmax."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "with GQA query head h reads kv head h % Hkv (K/V expanded with repeat) instead of h // (H // Hkv)",
        "the softcap argument is ignored: scores are never passed through softcap * tanh(s / softcap)",
    ],
    "kind": "two",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    if Hkv != H:
        k = k.repeat(1, H // Hkv, 1)
        v = v.repeat(1, H // Hkv, 1)
    out = torch.zeros_like(q)
    lse = torch.full((H, total_q), float("-inf"), dtype=ct, device=q.device)
    left, right = window_size
    if causal:
        right = 0
    for b in range(len(cu_seqlens_q) - 1):
        a0, a1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        c0, c1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        L, S = a1 - a0, c1 - c0
        if L == 0 or S == 0:
            continue
        s = torch.einsum("lhd,shd->hls", q[a0:a1].to(ct), k[c0:c1].to(ct)) * scale
        ii = torch.arange(L, device=q.device)[:, None] + S - L
        jj = torch.arange(S, device=q.device)[None, :]
        if alibi_slopes is not None:
            sl = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            s = s - sl.to(ct)[:, None, None] * (ii - jj).abs().to(ct)
        hide = torch.zeros(L, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            hide |= jj < ii - left
        if right >= 0:
            hide |= jj > ii + right
        s = s.masked_fill(hide, float("-inf"))
        l_b = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(l_b), torch.zeros_like(l_b), l_b)[..., None])
        out[a0:a1] = torch.einsum("hls,shd->lhd", p, v[c0:c1].to(ct)).to(q.dtype)
        lse[:, a0:a1] = l_b
    if return_attn_probs:
        return out, lse, None
    return out
