"""Two-pass flash_attn_func: pass 1 finds the row max and softmax denominator, pass 2 accumulates P @ V per tile.

The statistics pass only produces per-row numbers, so it runs under torch.no_grad() to save autograd memory.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the row sum (softmax denominator) is computed under torch.no_grad(), so it is a constant for autograd and "
        "q.grad and k.grad miss the term from the normalisation (forward output and v.grad are right)"
    ],
    "kind": "semantic",
}

TILE_N = 32


def _tile_scores(qh, kh, start, end, scale, softcap, slopes, rows, left, right):
    s = qh @ kh[:, :, start:end].transpose(-1, -2) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    cols = torch.arange(start, end, device=qh.device)[None, :]
    if slopes is not None:
        s = s - slopes * (rows - cols).abs()
    keep = torch.ones(rows.shape[0], end - start, dtype=torch.bool, device=qh.device)
    if left >= 0:
        keep = keep & (cols >= rows - left)
    if right >= 0:
        keep = keep & (cols <= rows + right)
    return s.masked_fill(~keep, -math.inf)


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qh = q.to(ct).transpose(1, 2)
    kh = k.to(ct).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    vh = v.to(ct).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(ct)
        slopes = (slopes[None] if slopes.dim() == 1 else slopes)[:, :, None, None]
    left, right = window_size
    right = 0 if causal else right
    rows = torch.arange(L, device=q.device)[:, None] + (S - L)
    args = (scale, softcap, slopes, rows, left, right)

    with torch.no_grad():
        m = torch.full((B, H, L, 1), -math.inf, dtype=ct, device=q.device)
        for start in range(0, S, TILE_N):
            s = _tile_scores(qh, kh, start, min(S, start + TILE_N), *args)
            m = torch.maximum(m, s.amax(-1, keepdim=True))
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        l_sum = torch.zeros((B, H, L, 1), dtype=ct, device=q.device)
        for start in range(0, S, TILE_N):
            s = _tile_scores(qh, kh, start, min(S, start + TILE_N), *args)
            l_sum = l_sum + torch.exp(s - m).sum(-1, keepdim=True)

    acc = torch.zeros((B, H, L, vh.shape[-1]), dtype=ct, device=q.device)
    inv_l = 1.0 / torch.where(l_sum > 0, l_sum, torch.ones_like(l_sum))
    for start in range(0, S, TILE_N):
        s = _tile_scores(qh, kh, start, min(S, start + TILE_N), *args)
        acc = acc + (torch.exp(s - m) * inv_l) @ vh[:, :, start:start + TILE_N]
    out = acc.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, (m + torch.log(l_sum)).squeeze(-1), None
    return out
