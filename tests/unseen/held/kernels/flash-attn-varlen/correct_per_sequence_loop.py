"""flash_attn_varlen_func as a python loop over the packed sequences, each one a dense float32 attention problem.

Every sequence gets its own bottom-right diagonal (offset S_b - L_b), window, soft-cap and ALiBi row.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [],
    "kind": "correct",
}


def _one_sequence(q, k, v, scale, causal, window_size, softcap, slopes):
    # q (L, H, D), k/v (S, Hkv, D) -> out (L, H, D), lse (H, L)
    L, H, _ = q.shape
    S, Hkv, _ = k.shape
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = torch.einsum("lhd,shd->hls", q, k) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L, device=q.device)[:, None] + (S - L)
    j = torch.arange(S, device=q.device)[None, :]
    if slopes is not None:
        s = s - slopes[:, None, None] * (i - j).abs().to(s.dtype)
    left, right = window_size
    if causal:
        right = 0
    keep = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, dim=-1)                                   # (H, L)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    return torch.einsum("hls,shd->lhd", p, v), lse


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.zeros(total_q, H, v.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((H, total_q), -math.inf, dtype=ct, device=q.device)
    cq = cu_seqlens_q.tolist()
    ck = cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if q1 == q0 or k1 == k0:
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).to(ct)
        o, l_ = _one_sequence(q[q0:q1].to(ct), k[k0:k1].to(ct), v[k0:k1].to(ct), scale, causal, window_size,
                              softcap, slopes)
        out[q0:q1] = o
        lse[:, q0:q1] = l_
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
