TRUTH = {'api': 'flash-attn', 'bugs': ['the ALiBi bias is built in the dtype of alibi_slopes (float32) and added to the float64 scores, so for float64 inputs slope * |distance| carries float32 rounding (~1e-7 absolute per score); float64 ALiBi cases fail on out/lse/grads (alibi_H, alibi_BH_causal, softcap_alibi_window); float32/bfloat16 are unaffected'], 'kind': 'precision'}
import math

import torch


def _alibi_bias(slopes, B, H, L, S):
    dist = (torch.arange(L).view(L, 1) + (S - L) - torch.arange(S).view(1, S)).abs()
    slopes = slopes.view(1, H, 1, 1) if slopes.dim() == 1 else slopes.view(B, H, 1, 1)
    return -slopes * dist.to(slopes.dtype)


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    n_rep = H // Hkv

    qf = q.to(ct).permute(0, 2, 1, 3)
    kf = k.to(ct).permute(0, 2, 1, 3)
    vf = v.to(ct).permute(0, 2, 1, 3)
    if n_rep > 1:
        kf = kf[:, :, None].expand(B, Hkv, n_rep, S, D).reshape(B, H, S, D)
        vf = vf[:, :, None].expand(B, Hkv, n_rep, S, D).reshape(B, H, S, D)

    s = torch.matmul(qf, kf.transpose(-2, -1)) * softmax_scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        s = s + _alibi_bias(alibi_slopes, B, H, L, S)

    left, right = window_size
    if causal:
        right = 0
    i = torch.arange(L).view(L, 1) + (S - L)
    j = torch.arange(S).view(1, S)
    mask = torch.zeros(L, S, dtype=torch.bool)
    if left >= 0:
        mask |= j < i - left
    if right >= 0:
        mask |= j > i + right
    s = s.masked_fill(mask, float('-inf'))

    row_max = s.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    p = torch.exp(s - row_max)
    row_sum = p.sum(dim=-1, keepdim=True)
    out = torch.matmul(p / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum)), vf)
    lse = (row_max + torch.log(row_sum)).squeeze(-1)
    out = out.permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
