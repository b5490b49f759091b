"""Varlen flash attention: per-sequence dense scores; mask, soft-cap and softmax applied in one fused expression."""
import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "soft-capping is applied after masking: masked scores (-inf) become softcap * tanh(-inf) = -softcap, a finite "
        "value, so with softcap > 0 masked keys (causal/window) leak weight exp(-softcap - max) into the softmax; "
        "the cap must be applied before the mask",
        "the sequence loop runs over range(len(cu_seqlens_q) - 2), so the last packed sequence is never computed and its "
        "output rows stay 0 (lse -inf)",
    ],
    "kind": "two",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    nq, H, D = q.shape
    Hkv = k.shape[1]
    wt = torch.float64 if q.dtype == torch.float64 else torch.float32
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    o = torch.zeros(nq, H, v.shape[-1], dtype=wt, device=q.device)
    lse = torch.full((H, nq), float("-inf"), dtype=torch.float32, device=q.device)
    lo, hi = window_size
    if causal:
        hi = 0
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 2):
        a0, a1, b0, b1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        Lq, Lk = a1 - a0, b1 - b0
        if Lq == 0:
            continue
        qq = q[a0:a1].to(wt).permute(1, 0, 2)
        kk = k[b0:b1].to(wt).permute(1, 0, 2).repeat_interleave(H // Hkv, 0)
        vv = v[b0:b1].to(wt).permute(1, 0, 2).repeat_interleave(H // Hkv, 0)
        s = torch.einsum("hid,hjd->hij", qq, kk) * sm_scale
        qi = torch.arange(Lq, device=q.device)[:, None] + Lk - Lq
        kj = torch.arange(Lk, device=q.device)[None, :]
        masked = torch.zeros(Lq, Lk, dtype=torch.bool, device=q.device)
        if lo >= 0:
            masked |= kj < qi - lo
        if hi >= 0:
            masked |= kj > qi + hi
        s = s.masked_fill(masked, float("-inf"))
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if alibi_slopes is not None:
            sl = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).to(wt)
            s = s - sl[:, None, None] * (qi - kj).abs().to(wt)
        row = torch.logsumexp(s, dim=-1)
        w = torch.exp(s - row.masked_fill(torch.isinf(row), 0.0)[..., None])
        o[a0:a1] = torch.einsum("hij,hjd->hid", w, vv).permute(1, 0, 2)
        lse[:, a0:a1] = row.float()
    o = o.to(q.dtype)
    return (o, lse, None) if return_attn_probs else o
