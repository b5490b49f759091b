"""Vectorised varlen attention: one (total_q, total_k) score matrix with a block-diagonal sequence mask, so the
whole packed batch is a single GEMM."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the bottom-right causal/window offset is taken from max_seqlen_k - max_seqlen_q for every sequence "
        "instead of each sequence's own S_b - L_b, so sequences whose length difference differs from the "
        "batch maximum get the wrong diagonal"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    total_k, Hkv = k.shape[0], k.shape[1]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cu_q = cu_seqlens_q.long()
    cu_k = cu_seqlens_k.long()
    tq = torch.arange(total_q, device=q.device)
    tk = torch.arange(total_k, device=q.device)
    seq_q = torch.searchsorted(cu_q[1:], tq, right=True)
    seq_k = torch.searchsorted(cu_k[1:], tk, right=True)
    pos_q = tq - cu_q[seq_q]
    pos_k = tk - cu_k[seq_k]
    diag = pos_q + (max_seqlen_k - max_seqlen_q)

    kx = k.to(f).repeat_interleave(H // Hkv, dim=1)
    vx = v.to(f).repeat_interleave(H // Hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.to(f), kx) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    rel = diag[:, None] - pos_k[None, :]
    if alibi_slopes is not None:
        sl = alibi_slopes.to(f)
        sl = sl[None, :, None].expand(total_q, H, 1) if sl.dim() == 1 else sl[seq_q][:, :, None]
        s = s - sl.permute(1, 0, 2) * rel.abs().to(f)
    vis = seq_q[:, None] == seq_k[None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        vis &= rel <= left
    if right >= 0:
        vis &= rel >= -right
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.nan_to_num(lse, neginf=0.0)[..., None])
    out = torch.einsum("hqk,khd->qhd", p, vx).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
