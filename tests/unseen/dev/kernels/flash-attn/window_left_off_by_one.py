"""Dense flash_attn_func port built on one (L, S) boolean visibility grid from broadcast index arithmetic."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the window's left bound is exclusive (keys j > i + S - L - left) instead of inclusive, so with "
        "window_size[0] = left >= 0 each query sees one key too few on the left"
    ],
    "kind": "semantic",
}


def _visibility(L, S, causal, window_size, device):
    left, right = window_size
    if causal:
        right = 0
    qpos = torch.arange(L, device=device)[:, None] + (S - L)
    kpos = torch.arange(S, device=device)[None, :]
    rel = kpos - qpos                                  # <0: left of the diagonal
    vis = torch.ones(L, S, dtype=torch.bool, device=device)
    if left >= 0:
        vis &= rel > -left
    if right >= 0:
        vis &= rel <= right
    return vis, rel


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p:
        raise NotImplementedError("dropout_p must be 0")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    wdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    qh = q.transpose(1, 2).to(wdt)
    kh = k.transpose(1, 2).to(wdt)
    vh = v.transpose(1, 2).to(wdt)
    if Hkv != H:
        kh = kh[:, torch.arange(H, device=q.device) // (H // Hkv)]
        vh = vh[:, torch.arange(H, device=q.device) // (H // Hkv)]
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    vis, rel = _visibility(L, S, causal, window_size, q.device)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(wdt)
        slopes = slopes[None] if slopes.dim() == 1 else slopes
        s = s - slopes[..., None, None] * rel.abs().to(wdt)
    s = s.masked_fill(~vis, -math.inf)
    m = s.amax(-1, keepdim=True).detach()
    m = m.masked_fill(torch.isinf(m), 0.0)
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    o = torch.matmul(e, vh) / den.masked_fill(den == 0, 1.0)
    lse = (m + torch.log(den)).squeeze(-1)
    o = o.transpose(1, 2).to(q.dtype)
    return (o, lse, None) if return_attn_probs else o
