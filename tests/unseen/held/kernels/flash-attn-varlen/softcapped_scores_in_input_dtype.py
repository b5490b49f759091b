"""Varlen attention for Gemma-2-style soft-capped logits: per-sequence loop, cap the logits, float32 softmax.

The logits are produced by one einsum on the packed inputs' slices; the softmax and P @ V run in float32.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the scores q.k * scale and the soft-cap softcap * tanh(s / softcap) are computed in the input dtype and only "
        "then upcast for the softmax, so in bfloat16/float16 the capped logits (magnitudes up to softcap) are "
        "rounded to 8/11 bits and the output error is several times PyTorch's"
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
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.zeros(total_q, H, v.shape[-1], dtype=acc, device=q.device)
    lse = torch.full((H, total_q), -math.inf, dtype=acc, device=q.device)
    left, right = window_size
    if causal:
        right = 0
    for b in range(cu_seqlens_q.numel() - 1):
        qs, qe = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ks, ke = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        L, S = qe - qs, ke - ks
        if L == 0 or S == 0:
            continue
        kb = k[ks:ke].repeat_interleave(H // Hkv, dim=1)
        vb = v[ks:ke].repeat_interleave(H // Hkv, dim=1).to(acc)
        logits = torch.einsum("lhd,shd->hls", q[qs:qe], kb) * scale
        if softcap > 0.0:
            logits = softcap * torch.tanh(logits / softcap)
        logits = logits.to(acc)
        i = torch.arange(L, device=q.device)[:, None] + S - L
        j = torch.arange(S, device=q.device)[None, :]
        if alibi_slopes is not None:
            sl = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).to(acc)
            logits = logits - sl[:, None, None] * (i - j).abs()
        vis = torch.ones(L, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= j >= i - left
        if right >= 0:
            vis &= j <= i + right
        logits = logits.masked_fill(~vis, -math.inf)
        row_lse = torch.logsumexp(logits, -1)
        p = torch.exp(logits - row_lse.nan_to_num(neginf=0.0)[..., None])
        out[qs:qe] = torch.einsum("hls,shd->lhd", p, vb)
        lse[:, qs:qe] = row_lse
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
