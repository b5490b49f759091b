"""flash_attn_varlen_func as a loop over the packed sequences, each one a dense flash_attn_func problem."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [],
    "kind": "correct",
}


def _one_sequence(q, k, v, scale, causal, window_size, softcap, slopes):
    # q (L, H, D), k/v (S, Hkv, D) -> out (L, H, D), lse (H, L)
    L, H, D = q.shape
    S, Hkv = k.shape[0], k.shape[1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    kx = k.to(acc).repeat_interleave(H // Hkv, dim=1)
    vx = v.to(acc).repeat_interleave(H // Hkv, dim=1)
    s = torch.einsum("lhd,shd->hls", q.to(acc), kx) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qpos = torch.arange(L, device=q.device)[:, None] + (S - L)
    kpos = torch.arange(S, device=q.device)[None, :]
    if slopes is not None:
        s = s - slopes.to(acc)[:, None, None] * (qpos - kpos).abs().to(acc)
    left, right = window_size
    if causal:
        right = 0
    vis = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        vis &= kpos >= qpos - left
    if right >= 0:
        vis &= kpos <= qpos + right
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    out = torch.einsum("hls,shd->lhd", p, vx)
    return out, lse


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.zeros_like(q)
    lse = torch.full((H, total_q), float("-inf"), dtype=lse_dtype, device=q.device)
    cq = cu_seqlens_q.tolist()
    ck = cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if q1 == q0:
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
        o, lb_ = _one_sequence(q[q0:q1], k[k0:k1], v[k0:k1], scale, causal, window_size, softcap, slopes)
        out[q0:q1] = o.to(q.dtype)
        lse[:, q0:q1] = lb_.to(lse_dtype)
    if return_attn_probs:
        return out, lse, None
    return out
