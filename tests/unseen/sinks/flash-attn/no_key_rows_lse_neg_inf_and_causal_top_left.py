"""flash_attn_func with a learnable sink, dense: softmax over the scores plus a sink column; rows that see no key are
handled explicitly the way the sink-less kernel did it (output 0, lse -inf).
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "rows that see no key are given lse = -inf (the sink-less convention) instead of lse = sink, although a sink "
        "is present",
        "causal=True masks keys with j > i (top-left diagonal) instead of j > i + S - L, so causal calls with L != S "
        "see the wrong keys",
    ],
    "kind": "two",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    kx = k.to(cdt).repeat_interleave(H // Hkv, dim=2)
    vx = v.to(cdt).repeat_interleave(H // Hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.to(cdt), kx) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L, device=q.device).unsqueeze(1)
    j = torch.arange(S, device=q.device).unsqueeze(0)
    if alibi_slopes is not None:
        s = s - alibi_slopes.to(cdt).view(-1, H, 1, 1) * (i + S - L - j).abs()
    hide = torch.zeros(L, S, dtype=torch.bool, device=q.device)
    left, right = window_size
    if left >= 0:
        hide |= j < i + S - L - left
    if right >= 0:
        hide |= j > i + S - L + right
    if causal:
        hide |= j > i
    s = s.masked_fill(hide, float("-inf"))

    if learnable_sink is not None:
        sk = learnable_sink.to(cdt).view(1, H, 1, 1).expand(B, H, L, 1)
    else:
        sk = s.new_full((B, H, L, 1), float("-inf"))
    logits = torch.cat([s, sk], dim=-1)
    empty = hide.all(dim=-1)  # rows with no visible key
    mx = logits.amax(-1, keepdim=True).detach()
    mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
    e = torch.exp(logits - mx)
    z = e.sum(-1, keepdim=True)
    probs = e[..., :S] / torch.where(z == 0, torch.ones_like(z), z)
    lse = (mx + torch.log(z)).squeeze(-1).masked_fill(empty, float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", probs, vx).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
