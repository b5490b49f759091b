"""Dense FlashAttention-2 forward: Q K^T on the (B, H, L, D) views, softcap / ALiBi / window masks on the score
matrix, softmax statistics and P @ V in float32."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "Q @ K^T is computed on the input-dtype tensors, so for bfloat16 inputs the raw scores are rounded to"
        " bfloat16 before the scale, softcap and softmax; q and k should be upcast to float32 before the "
        "matmul (measured, bf16 B=1 H=4 L=S=1024 D=64 non-causal, max abs error vs float64: out 3.17e-3 vs "
        "8.73e-4 for the correct kernels, 3.6x; lse 1.4e-3 vs 8.0e-7)",
    ],
    "kind": "precision",
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

    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2)
    vh = v.to(wt).transpose(1, 2)
    if Hk != H:
        kh = kh.repeat_interleave(H // Hk, dim=1)
        vh = vh.repeat_interleave(H // Hk, dim=1)

    s = torch.matmul(qh, kh.transpose(-2, -1)).to(wt) * softmax_scale
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
