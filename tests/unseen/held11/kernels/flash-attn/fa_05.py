TRUTH = {'api': 'flash-attn', 'bugs': ['the split-KV combine computes weights exp(lse_split - lse_total) with lse_total = -inf for a query row that sees no key at all, giving NaN output (and NaN dv) instead of zeros; shows only on rows with no visible key (causal with L > S: causal_L>S_mqa)'], 'kind': 'semantic'}
import math

import torch

NUM_SPLITS = 3


def _partial(qh, kh, vh, scale, q_pos, k_pos, left, right, softcap, slopes):
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        s = s - slopes * (q_pos - k_pos).abs().to(s.dtype)
    keep = torch.ones(s.shape[-2:], dtype=torch.bool)
    if left >= 0:
        keep &= k_pos >= q_pos - left
    if right >= 0:
        keep &= k_pos <= q_pos + right
    s = s.masked_fill(~keep, float('-inf'))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    o = torch.matmul(e, vh) / torch.where(l > 0, l, torch.ones_like(l))
    return o, m + torch.log(l)


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    qh = q.to(ct).transpose(1, 2)
    kh = k.to(ct).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    vh = v.to(ct).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(ct).reshape(-1, H, 1, 1)
    q_pos = torch.arange(L).view(L, 1) + (S - L)

    chunk = (S + NUM_SPLITS - 1) // NUM_SPLITS
    o_parts, lse_parts = [], []
    for start in range(0, S, chunk):
        stop = min(start + chunk, S)
        k_pos = torch.arange(start, stop).view(1, -1)
        o_i, lse_i = _partial(qh, kh[:, :, start:stop], vh[:, :, start:stop], scale, q_pos, k_pos, left, right,
                              softcap, slopes)
        o_parts.append(o_i)
        lse_parts.append(lse_i)

    lse_all = torch.stack(lse_parts)
    lse = torch.logsumexp(lse_all, dim=0)
    w = torch.exp(lse_all - lse)
    out = (w * torch.stack(o_parts)).sum(0)
    out = out.transpose(1, 2).to(q.dtype)
    lse = lse.squeeze(-1)
    if return_attn_probs:
        return out, lse, None
    return out
