"""Varlen attention by per-sequence loop; each sequence's K/V window is cut at a fixed max_seqlen_k length like
the padded batch layout the kernel was first written for."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "each sequence's keys are sliced as k[cu_seqlens_k[b] : cu_seqlens_k[b] + max_seqlen_k], so every "
        "sequence shorter than max_seqlen_k also attends the next sequence's keys (and its S_b is taken as that "
        "longer length)"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    out = torch.zeros_like(q)
    lse = torch.full((H, total_q), -math.inf, dtype=acc, device=q.device)
    left, right = window_size
    if causal:
        right = 0
    for b in range(cu_seqlens_q.shape[0] - 1):
        q0, q1 = cu_seqlens_q[b].item(), cu_seqlens_q[b + 1].item()
        k0 = cu_seqlens_k[b].item()
        k1 = min(k0 + max_seqlen_k, k.shape[0])
        L, S = q1 - q0, k1 - k0
        if L == 0:
            continue
        qb = q[q0:q1].to(acc).permute(1, 0, 2)
        kb = k[k0:k1].to(acc).repeat_interleave(H // Hkv, 1).permute(1, 2, 0)
        vb = v[k0:k1].to(acc).repeat_interleave(H // Hkv, 1).permute(1, 0, 2)
        s = torch.bmm(qb, kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(L, device=q.device)[:, None] + S - L
        j = torch.arange(S, device=q.device)[None, :]
        if alibi_slopes is not None:
            a = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            s = s - a.to(acc)[:, None, None] * (i - j).abs().to(acc)
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            keep &= j >= i - left
        if right >= 0:
            keep &= j <= i + right
        s = s.masked_fill(~keep, -math.inf)
        mx = s.amax(-1, keepdim=True) if S > 0 else torch.zeros(H, L, 1, dtype=acc, device=q.device)
        mx = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(s - mx)
        z = e.sum(-1, keepdim=True)
        o = torch.bmm(e, vb) / torch.where(z > 0, z, torch.ones_like(z))
        out[q0:q1] = o.permute(1, 0, 2).to(q.dtype)
        lse[:, q0:q1] = torch.where(z > 0, mx + torch.log(z), torch.full_like(z, -math.inf)).squeeze(-1)
    if return_attn_probs:
        return out, lse, None
    return out
