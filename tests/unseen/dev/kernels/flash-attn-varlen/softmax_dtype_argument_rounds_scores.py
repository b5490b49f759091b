"""Varlen attention on a block-diagonal packed score matrix; float32 scores, softmax emitting the input dtype
directly so P can feed the PV GEMM without an extra cast."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the softmax is called as torch.softmax(scores, -1, dtype=q.dtype), which casts the float32 scores to "
        "bfloat16/float16 before the softmax, so every logit is rounded to the input dtype and the output error "
        "is several times PyTorch's when logits are large"
    ],
    "kind": "precision",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    total_k, Hkv = k.shape[:2]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cq, ck = cu_seqlens_q.long(), cu_seqlens_k.long()
    tq = torch.arange(total_q, device=q.device)
    tk = torch.arange(total_k, device=q.device)
    sq = torch.searchsorted(cq, tq, right=True) - 1
    sk = torch.searchsorted(ck, tk, right=True) - 1
    lens_q = cq[1:] - cq[:-1]
    lens_k = ck[1:] - ck[:-1]
    qpos = (tq - cq[sq]) + (lens_k - lens_q)[sq]
    kpos = tk - ck[sk]
    rel = qpos[:, None] - kpos[None, :]
    vis = sq[:, None] == sk[None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        vis &= rel <= left
    if right >= 0:
        vis &= rel >= -right
    g = H // Hkv
    s = torch.einsum("ihd,jhd->hij", q.to(f), k.to(f).repeat_interleave(g, 1)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        a = alibi_slopes.to(f)
        a = a[:, None, None] if a.dim() == 1 else a[sq].T[:, :, None]
        s = s - a * rel.abs().to(f)
    s = s.masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, -1)
    empty = torch.isinf(lse)
    p = torch.softmax(s.masked_fill(empty[..., None], 0.0), -1, dtype=q.dtype)
    p = p.masked_fill(empty[..., None], 0)
    out = torch.einsum("hij,jhd->ihd", p.to(f), v.to(f).repeat_interleave(g, 1)).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
