import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "Query positions are taken top-left (qpos = i) instead of bottom-right (i + S - L): the causal limit, the sliding window bounds and the ALiBi distance |i - j| all use the unshifted query index. Identical when L == S; wrong out, lse and gradients for causal / windowed / ALiBi cases with L != S."
    ],
    "kind": "semantic"
}



def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    rep = H // Hkv

    qh = q.to(cdt).permute(0, 2, 1, 3)                                   # B H L D
    kh = k.to(cdt).permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)     # B H S D
    vh = v.to(cdt).permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)

    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap

    qpos = torch.arange(L).view(L, 1)
    kpos = torch.arange(S).view(1, S)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cdt)
        sl = sl.view(1, H, 1, 1) if sl.dim() == 1 else sl.view(B, H, 1, 1)
        s = s - sl * (qpos - kpos).abs().to(cdt)

    left, right = window_size
    if causal:
        right = 0
    keep = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        keep = keep & (kpos >= qpos - left)
    if right >= 0:
        keep = keep & (kpos <= qpos + right)
    s = s.masked_fill(~keep, float('-inf'))

    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    has = l > 0
    p = e / torch.where(has, l, torch.ones_like(l))
    o = torch.matmul(p, vh)

    out = o.permute(0, 2, 1, 3).to(q.dtype)
    if not return_attn_probs:
        return out
    lse = torch.where(has, m + torch.log(torch.where(has, l, torch.ones_like(l))), torch.full_like(l, float('-inf')))
    return out, lse.squeeze(-1).detach(), None
