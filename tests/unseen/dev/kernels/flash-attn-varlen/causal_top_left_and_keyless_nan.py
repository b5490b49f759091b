"""Varlen causal attention, per-sequence loop, F.softmax on float32 scores."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "causal masking is aligned top-left inside each sequence (query i sees keys j <= i) instead of "
        "bottom-right (j <= i + S_b - L_b), so sequences with L_b != S_b get the wrong causal diagonal",
        "a query row that sees no key (e.g. window_size=(left, 0) with L_b > S_b) gets NaN output from the "
        "softmax over an all -inf row instead of zeros",
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
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.empty_like(q)
    lse = torch.empty((H, total_q), dtype=f, device=q.device)
    for b in range(cu_seqlens_q.numel() - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        L, S = q1 - q0, k1 - k0
        if L == 0:
            continue
        kk = k[k0:k1].to(f).repeat_interleave(H // Hkv, 1)
        vv = v[k0:k1].to(f).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[q0:q1].to(f), kk) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(L, device=q.device)[:, None]
        j = torch.arange(S, device=q.device)[None, :]
        if alibi_slopes is not None:
            sl = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            s = s - sl.to(f)[:, None, None] * (i + S - L - j).abs().to(f)
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device)
        left, right = window_size
        if causal:
            keep &= j <= i
        if left >= 0:
            keep &= j >= i + S - L - left
        if right >= 0:
            keep &= j <= i + S - L + right
        s = s.masked_fill(~keep, float("-inf"))
        p = torch.softmax(s, dim=-1)
        out[q0:q1] = torch.einsum("hls,shd->lhd", p, vv).to(q.dtype)
        lse[:, q0:q1] = torch.logsumexp(s, dim=-1)
    if return_attn_probs:
        return out, lse, None
    return out
