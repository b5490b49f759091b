"""Fully vectorised varlen attention: one (H, total_q, total_k) score matrix with a block-diagonal sequence mask.

Each packed row/column gets its sequence id by searchsorted on the cumulative lengths; positions are row - start.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "sequence ids come from torch.searchsorted(cu_seqlens[1:], idx) with the default right=False, so the first "
        "query row and first key row of every sequence after the first are assigned to the previous sequence "
        "(wrong keys, positions and mask at every sequence boundary)"
    ],
    "kind": "semantic",
}


def _seq_ids(cu, n):
    idx = torch.arange(n, device=cu.device)
    sid = torch.searchsorted(cu[1:].long(), idx)
    return sid, idx - cu.long()[sid]


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    Tq, H, D = q.shape
    Tk, Hkv, _ = k.shape
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    sq, pq = _seq_ids(cu_seqlens_q, Tq)
    sk, pk = _seq_ids(cu_seqlens_k, Tk)
    Lb = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    Sb = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    i = (pq + Sb[sq] - Lb[sq])[:, None]             # query position on its sequence's key axis
    j = pk[None, :]

    kk = k.to(ct).repeat_interleave(H // Hkv, dim=1)
    vv = v.to(ct).repeat_interleave(H // Hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.to(ct), kk) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        sl = sl[None, :].expand(Lb.numel(), H) if sl.dim() == 1 else sl
        s = s - sl[sq].t()[:, :, None] * (i - j).abs()
    keep = sq[:, None] == sk[None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        keep = keep & (j >= i - left)
    if right >= 0:
        keep = keep & (j <= i + right)
    s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, dim=-1)                      # (H, Tq)
    p = torch.exp(s - lse.masked_fill(torch.isinf(lse), 0.0)[..., None])
    out = torch.einsum("hqk,khd->qhd", p, vv).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
