"""Dense flash_attn_func for Gemma-2 / ALiBi models: bias the scores, cap them, mask them, torch.softmax in float32.

The log-sum-exp is returned alongside for the merge kernels.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the ALiBi bias is added before the soft-cap, so the bias goes through tanh together with the score "
        "instead of being added to the capped score (wrong whenever softcap > 0 and alibi_slopes are given)",
        "a query row that sees no key (causal with L > S, or a window that misses every key) gets torch.softmax of "
        "an all -inf row, i.e. NaN output, instead of zeros",
    ],
    "kind": "two",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    kx = k.to(ct).repeat_interleave(H // Hkv, dim=2)
    vx = v.to(ct).repeat_interleave(H // Hkv, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.to(ct), kx) * scale
    qi = torch.arange(L, device=q.device).view(L, 1) + (S - L)
    kj = torch.arange(S, device=q.device).view(1, S)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(ct)
        slopes = slopes.view(1, H, 1, 1) if slopes.dim() == 1 else slopes.view(B, H, 1, 1)
        scores = scores - slopes * (qi - kj).abs().to(ct)
    if softcap > 0.0:
        scores = softcap * torch.tanh(scores / softcap)
    left, right = window_size
    if causal:
        right = 0
    mask = torch.zeros(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        mask = mask | (kj < qi - left)
    if right >= 0:
        mask = mask | (kj > qi + right)
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("bhqk,bkhd->bqhd", probs, vx).to(q.dtype)
    if return_attn_probs:
        return out, torch.logsumexp(scores, dim=-1), None
    return out
