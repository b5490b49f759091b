TRUTH = {'api': 'flash-attn', 'bugs': ['the ALiBi bias is slope * (j - (i + S - L)) without the absolute value, which only matches -slope*|i + S - L - j| for keys left of the diagonal; keys to the right of the diagonal get a positive bias, wrong for non-causal ALiBi (alibi_H, softcap_alibi_window); causal ALiBi is fine'], 'kind': 'semantic'}
import math

import torch


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    group = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    wl, wr = window_size
    if causal:
        wr = 0
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32

    diag = torch.arange(L).unsqueeze(1) + (S - L)
    col = torch.arange(S).unsqueeze(0)
    rel = (col - diag).to(dt)
    visible = torch.ones(L, S, dtype=torch.bool)
    if wl >= 0:
        visible &= col >= diag - wl
    if wr >= 0:
        visible &= col <= diag + wr

    outs, lses = [], []
    for b in range(B):
        qb = q[b].to(dt)
        kb = k[b].to(dt).repeat_interleave(group, dim=1)
        vb = v[b].to(dt).repeat_interleave(group, dim=1)
        s = torch.einsum('lhd,shd->hls', qb, kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if alibi_slopes is not None:
            sl = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
            s = s + sl.to(dt).view(H, 1, 1) * rel
        s = s.masked_fill(~visible, float('-inf'))
        mx = s.amax(-1, keepdim=True)
        mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(s - mx)
        den = e.sum(-1, keepdim=True)
        p = e / torch.where(den > 0, den, torch.ones_like(den))
        outs.append(torch.einsum('hls,shd->lhd', p, vb))
        lses.append((mx + torch.log(den)).squeeze(-1))
    out = torch.stack(outs).to(q.dtype)
    lse = torch.stack(lses)
    if return_attn_probs:
        return out, lse, None
    return out
