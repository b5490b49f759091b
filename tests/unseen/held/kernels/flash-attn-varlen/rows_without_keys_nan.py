"""Vectorised varlen attention: sequence ids by repeat_interleave over the lengths, block-diagonal mask, torch.softmax.

All sequences are handled by one (H, total_q, total_k) float32 score tensor.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "a query row that sees no key (its sequence has 0 keys, or causal/window rows of a sequence with L_b > S_b) "
        "is fully masked and torch.softmax returns NaN output for it instead of zeros"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    Tq, H, D = q.shape
    Tk, Hkv, _ = k.shape
    dev = q.device
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    lq = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    lk = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    B = lq.numel()
    seq_q = torch.repeat_interleave(torch.arange(B, device=dev), lq)
    seq_k = torch.repeat_interleave(torch.arange(B, device=dev), lk)
    pos_q = torch.arange(Tq, device=dev) - cu_seqlens_q[:-1].long()[seq_q] + (lk - lq)[seq_q]
    pos_k = torch.arange(Tk, device=dev) - cu_seqlens_k[:-1].long()[seq_k]
    i, j = pos_q[:, None], pos_k[None, :]

    g = H // Hkv
    s = torch.einsum("qhd,khd->hqk", q.to(ct), k.to(ct).repeat_interleave(g, 1)) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        per_row = sl[seq_q].t() if sl.dim() == 2 else sl[:, None].expand(H, Tq)
        s = s - per_row[:, :, None] * (i - j).abs()
    allowed = seq_q[:, None] == seq_k[None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        allowed = allowed & (j >= i - left)
    if right >= 0:
        allowed = allowed & (j <= i + right)
    s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, dim=-1)
    out = torch.einsum("hqk,khd->qhd", p, v.to(ct).repeat_interleave(g, 1)).to(q.dtype)
    if return_attn_probs:
        return out, torch.logsumexp(s, dim=-1), None
    return out
