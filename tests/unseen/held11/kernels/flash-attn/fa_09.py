TRUTH = {'api': 'flash-attn', 'bugs': ['the softmax scale, the softcap and the ALiBi bias are applied to the raw q k^T product while it is still in the input dtype and only upcast afterwards; for bfloat16 inputs the scores are re-rounded to bfloat16 after each step (double rounding of s*scale, capped and biased scores), roughly 2-3x the bf16 baseline error: fails on bfloat16 for causal_L<S_gqa (out/dk/dv), softcap (out) and alibi_BH_causal (lse); float32/float64 are unaffected'], 'kind': 'precision'}
import math

import torch


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    g = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32

    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(g, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(g, dim=1)

    s = torch.matmul(qh, kh.transpose(-1, -2))
    s = s * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L, dtype=acc).view(L, 1) + (S - L)
    j = torch.arange(S, dtype=acc).view(1, S)
    if alibi_slopes is not None:
        sl = alibi_slopes.view(-1, H, 1, 1)
        s = s - (sl * (i - j).abs()).to(s.dtype)
    s = s.to(acc)

    left, right = window_size
    if causal:
        right = 0
    visible = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    s = s.masked_fill(~visible, float('-inf'))

    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = torch.matmul(p / torch.where(l > 0, l, torch.ones_like(l)), vh.to(acc))
    out = o.transpose(1, 2).to(q.dtype)
    lse = (m + torch.log(l)).squeeze(-1)
    if return_attn_probs:
        return out, lse, None
    return out
