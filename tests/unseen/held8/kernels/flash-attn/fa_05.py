TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "ALiBi distance uses top-left query positions |i - j| instead of |i + S - L - j| (mask uses the right positions); wrong only with alibi and L != S (alibi_BH_causal)"
    ],
    "kind": "semantic"
}

import math
import torch


def _allowed(L, S, causal, window_size):
    left, right = window_size
    if causal:
        right = 0
    i = torch.arange(L)[:, None] + (S - L)
    j = torch.arange(S)[None, :]
    ok = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        ok = ok & (j >= i - left)
    if right >= 0:
        ok = ok & (j <= i + right)
    return ok, (torch.arange(L)[:, None] - j)


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    sc = softmax_scale if softmax_scale is not None else D ** -0.5
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    qh = q.to(cdt).permute(0, 2, 1, 3)
    kh = k.to(cdt).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, dim=1)
    vh = v.to(cdt).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * sc
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    ok, rel = _allowed(L, S, causal, window_size)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cdt)
        sl = sl.view(1, H, 1, 1) if sl.dim() == 1 else sl.view(B, H, 1, 1)
        s = s - sl * rel.abs().to(cdt)
    s = s.masked_fill(~ok, float('-inf'))
    has = ok.any(-1)
    lse = torch.logsumexp(s.masked_fill(~has[:, None], 0.0), dim=-1)
    lse = lse.masked_fill(~has, float('-inf'))
    lse_safe = torch.where(has, lse, torch.zeros_like(lse))
    p = torch.exp(s - lse_safe[..., None])
    out = torch.matmul(p, vh).permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
