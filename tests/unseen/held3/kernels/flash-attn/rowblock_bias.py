"""flash_attn_func equivalent: scores for all heads at once, ALiBi and window handled with broadcast position grids."""
import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "per-batch ALiBi slopes of shape (B, H) are flattened and truncated to the first H entries, so every batch uses "
        "batch 0's slopes; slopes[b, h] must be used for batch b",
        "the left edge of the sliding window is exclusive (j > i + S - L - left), so each query sees one key too few on the "
        "left; flash-attn's window is inclusive: j >= i + S - L - left",
    ],
    "kind": "two",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    rep = H // Hkv
    qf = q.to(dtype).permute(0, 2, 1, 3)
    kf = k.to(dtype).permute(0, 2, 3, 1).repeat_interleave(rep, dim=1)
    vf = v.to(dtype).permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)

    s = torch.matmul(qf, kf) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    rows = torch.arange(L, device=q.device).view(1, 1, L, 1) + (S - L)
    cols = torch.arange(S, device=q.device).view(1, 1, 1, S)
    if alibi_slopes is not None:
        slope = alibi_slopes.to(dtype).reshape(-1)[:H].reshape(1, H, 1, 1)
        s = s - slope * (rows - cols).abs().to(dtype)
    lo, hi = window_size
    if causal:
        hi = 0
    bad = torch.zeros(1, 1, L, S, dtype=torch.bool, device=q.device)
    if lo >= 0:
        bad |= cols <= rows - lo
    if hi >= 0:
        bad |= cols > rows + hi
    s = s.masked_fill(bad, float("-inf"))

    lse = torch.logsumexp(s, dim=-1)
    finite = torch.isfinite(lse)
    shift = torch.where(finite, lse, torch.zeros_like(lse)).detach()
    e = torch.exp(s - shift.unsqueeze(-1))
    norm = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(norm > 0, norm, torch.ones_like(norm))
    out = torch.matmul(p, vf).permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse.detach().float(), None
    return out
