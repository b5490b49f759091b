"""Dense FlashAttention-2 forward in float32/float64: full (B, H, Lq, Sk) score matrix with index-built masks."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [],
    "kind": "correct",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
    in_dtype = q.dtype
    wt = torch.float64 if in_dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(D)

    qh = q.to(wt).transpose(1, 2)
    kh = k.to(wt).transpose(1, 2)
    vh = v.to(wt).transpose(1, 2)
    if Hk != H:
        kh = kh.repeat_interleave(H // Hk, dim=1)
        vh = vh.repeat_interleave(H // Hk, dim=1)

    s = torch.matmul(qh, kh.transpose(-2, -1)) * softmax_scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)

    row = torch.arange(Lq, device=q.device).view(Lq, 1) + (Sk - Lq)
    col = torch.arange(Sk, device=q.device).view(1, Sk)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(wt)
        slopes = slopes.view(1, H, 1, 1) if slopes.dim() == 1 else slopes.view(B, H, 1, 1)
        s = s - slopes * (row - col).abs().to(wt)

    left, right = window_size
    if causal:
        right = 0
    keep = torch.ones(Lq, Sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        keep = keep & (col >= row - left)
    if right >= 0:
        keep = keep & (col <= row + right)
    s = s.masked_fill(~keep, float("-inf"))

    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    out = torch.matmul(p, vh) / torch.where(l > 0, l, torch.ones_like(l))
    out = out.transpose(1, 2).to(in_dtype)
    if return_attn_probs:
        lse = (m + torch.log(l)).squeeze(-1)
        return out, lse.detach().to(wt), None
    return out
