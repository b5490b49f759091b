"""Tiled FlashAttention forward (key blocks of 64) with sliding-window support for local attention models."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "window_size's right side is ignored: with window_size=(left, right), right >= 0 and causal=False, keys "
        "after i + S - L + right stay visible"
    ],
    "kind": "semantic",
}

BLOCK = 64


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    sm_scale = softmax_scale or 1.0 / math.sqrt(D)
    group = H // Hkv
    Q = q.permute(0, 2, 1, 3).to(acc_t)
    K = k.permute(0, 2, 1, 3).to(acc_t).repeat_interleave(group, 1)
    V = v.permute(0, 2, 1, 3).to(acc_t).repeat_interleave(group, 1)
    wl = window_size[0]
    diag = torch.arange(L, device=q.device).unsqueeze(1) + S - L
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(acc_t).reshape(-1, H, 1, 1)

    run_max = torch.full((B, H, L, 1), -math.inf, dtype=acc_t, device=q.device)
    run_sum = torch.zeros((B, H, L, 1), dtype=acc_t, device=q.device)
    run_out = torch.zeros((B, H, L, D), dtype=acc_t, device=q.device)
    for start in range(0, S, BLOCK):
        stop = min(start + BLOCK, S)
        kpos = torch.arange(start, stop, device=q.device).unsqueeze(0)
        scores = Q @ K[:, :, start:stop].transpose(-1, -2) * sm_scale
        if softcap > 0.0:
            scores = softcap * torch.tanh(scores / softcap)
        if alibi_slopes is not None:
            scores = scores - slopes * (diag - kpos).abs()
        visible = torch.ones_like(kpos - diag, dtype=torch.bool)
        if causal:
            visible = visible & (kpos <= diag)
        if wl >= 0:
            visible = visible & (kpos >= diag - wl)
        scores = scores.masked_fill(~visible, -math.inf)
        new_max = torch.maximum(run_max, scores.amax(-1, keepdim=True)).detach()
        safe = torch.where(new_max == -math.inf, torch.zeros_like(new_max), new_max)
        corr = torch.exp(run_max - safe)
        probs = torch.exp(scores - safe)
        run_sum = run_sum * corr + probs.sum(-1, keepdim=True)
        run_out = run_out * corr + probs @ V[:, :, start:stop]
        run_max = new_max
    nz = run_sum > 0
    out = torch.where(nz, run_out / torch.where(nz, run_sum, torch.ones_like(run_sum)), torch.zeros_like(run_out))
    lse = torch.where(nz, run_max + torch.log(run_sum), torch.full_like(run_sum, -math.inf)).squeeze(-1)
    out = out.permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
