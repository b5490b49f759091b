"""Varlen forward (per-sequence loop) that keeps scores and statistics in float32 but evaluates the exponentials in
the input dtype, as the fused kernels do with their half-precision exp units."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the exponentials are evaluated in the input dtype (exp((s - m).to(q.dtype))), so for bfloat16 the "
        "argument and the result are both rounded to 8 bits and the softmax denominator, hence softmax_lse, is "
        "off by ~1e-3, tens to hundreds of times PyTorch's float32 lse error"
    ],
    "kind": "precision",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros_like(q)
    lse = torch.full((H, total_q), -math.inf, dtype=f, device=q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        L, S = cq[b + 1] - cq[b], ck[b + 1] - ck[b]
        if L == 0:
            continue
        qb = q[cq[b]:cq[b + 1]].to(f)
        kb = k[ck[b]:ck[b + 1]].to(f).repeat_interleave(H // Hkv, 1)
        vb = v[ck[b]:ck[b + 1]].to(f).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", qb, kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(L, device=q.device)[:, None] + S - L
        kj = torch.arange(S, device=q.device)[None, :]
        if alibi_slopes is not None:
            a = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            s = s - a.to(f)[:, None, None] * (qi - kj).abs().to(f)
        vis = torch.ones(L, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= kj >= qi - left
        if right >= 0:
            vis &= kj <= qi + right
        s = s.masked_fill(~vis, -math.inf)
        if S == 0:
            continue
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        p = torch.exp((s - m).to(q.dtype)).to(f)
        z = p.sum(-1, keepdim=True)
        o = torch.einsum("hls,shd->lhd", p / torch.where(z > 0, z, torch.ones_like(z)), vb)
        out[cq[b]:cq[b + 1]] = o.to(q.dtype)
        lse[:, cq[b]:cq[b + 1]] = torch.where(z > 0, m + torch.log(z), torch.full_like(z, -math.inf)).squeeze(-1)
    if return_attn_probs:
        return out, lse, None
    return out
