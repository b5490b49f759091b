"""Packed varlen attention with vectorised index arithmetic: token -> sequence id via searchsorted on cu_seqlens,
then one masked GEMM over the whole batch."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "token-to-sequence ids come from searchsorted(cu_seqlens[1:], idx) with right=False, so the first "
        "token of every sequence after the first is assigned to the previous sequence (wrong keys, wrong "
        "positions)"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    total_k, Hkv = k.shape[:2]
    wt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    cq, ck = cu_seqlens_q.long(), cu_seqlens_k.long()
    iq = torch.arange(total_q, device=q.device)
    ik = torch.arange(total_k, device=q.device)
    bq = torch.searchsorted(cq[1:], iq)
    bk = torch.searchsorted(ck[1:], ik)
    Lb = (cq[1:] - cq[:-1])[bq]
    Sb = (ck[1:] - ck[:-1])[bq]
    # position of each query on its own sequence's key axis (bottom-right aligned)
    qpos = iq - cq[bq] + Sb - Lb
    kpos = ik - ck[bk]
    dist = qpos[:, None] - kpos[None, :]
    same = bq[:, None] == bk[None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        same = same & (dist <= left)
    if right >= 0:
        same = same & (dist >= -right)
    heads = torch.arange(H, device=q.device) // (H // Hkv)
    s = torch.einsum("ihd,jhd->hij", q.to(wt), k.to(wt)[:, heads]) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        a = alibi_slopes.to(wt)
        a = a[:, None] if a.dim() == 1 else a[bq].T
        s = s - a[:, :, None] * dist.abs().to(wt)[None]
    s = s.masked_fill(~same, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    out = torch.einsum("hij,jhd->ihd", e / torch.where(z > 0, z, torch.ones_like(z)), v.to(wt)[:, heads])
    lse = torch.where(z > 0, m + torch.log(torch.where(z > 0, z, torch.ones_like(z))), torch.full_like(z, -math.inf))
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse.squeeze(-1), None
    return out
