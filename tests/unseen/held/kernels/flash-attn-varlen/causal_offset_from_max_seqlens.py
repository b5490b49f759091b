"""Varlen attention with one padded (B, max_seqlen_q, max_seqlen_k) score tensor: pack -> pad, dense, unpad.

Padding is masked per sequence; the causal/window diagonal is computed once for the padded grid.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the bottom-right diagonal (used by causal, the window and the ALiBi distance) is placed with the padded "
        "offset max_seqlen_k - max_seqlen_q instead of each sequence's own S_b - L_b, so every sequence with "
        "S_b - L_b != max_seqlen_k - max_seqlen_q gets the wrong causal/window mask and ALiBi bias"
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
    B = cu_seqlens_q.numel() - 1
    Lm, Sm = int(max_seqlen_q), int(max_seqlen_k)
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    lens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    lens_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()

    # pad: (B, Lm, H, D) and (B, Sm, Hkv, D)
    ar_q = torch.arange(Lm, device=q.device)
    ar_k = torch.arange(Sm, device=q.device)
    valid_q = ar_q[None, :] < lens_q[:, None]
    valid_k = ar_k[None, :] < lens_k[:, None]
    qp = torch.zeros(B, Lm, H, D, dtype=ft, device=q.device)
    kp = torch.zeros(B, Sm, Hkv, D, dtype=ft, device=q.device)
    vp = torch.zeros(B, Sm, Hkv, v.shape[-1], dtype=ft, device=q.device)
    qp[valid_q] = q.to(ft)
    kp[valid_k] = k.to(ft)
    vp[valid_k] = v.to(ft)
    kp = kp.repeat_interleave(H // Hkv, dim=2)
    vp = vp.repeat_interleave(H // Hkv, dim=2)

    s = torch.einsum("blhd,bshd->bhls", qp, kp) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    i = ar_q[:, None] + (Sm - Lm)
    j = ar_k[None, :]
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ft)
        sl = sl.expand(B, H) if sl.dim() == 1 else sl
        s = s - sl[:, :, None, None] * (i - j).abs()
    keep = valid_k[:, None, None, :].expand(B, 1, Lm, Sm).clone()
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse.nan_to_num(neginf=0.0)[..., None])
    o = torch.einsum("bhls,bshd->blhd", p, vp)
    out = o[valid_q].to(q.dtype)
    if return_attn_probs:
        return out, lse.permute(1, 0, 2)[:, valid_q], None
    return out
