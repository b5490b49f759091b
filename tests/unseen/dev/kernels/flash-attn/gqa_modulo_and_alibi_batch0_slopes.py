"""Dense FlashAttention port with MQA/GQA and per-head ALiBi: expands K/V to all query heads, float32 softmax."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "with GQA (Hkv < H) query head h reads kv head h % Hkv (K/V tiled with repeat) instead of h // (H // Hkv)",
        "alibi_slopes of shape (B, H) are read as alibi_slopes[0] for every batch element, so batches other than "
        "the first get the first batch's slopes",
    ],
    "kind": "two",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    if Hkv != H:
        k = k.repeat(1, 1, H // Hkv, 1)
        v = v.repeat(1, 1, H // Hkv, 1)
    s = torch.einsum("blhd,bshd->bhls", q.to(ft), k.to(ft)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    pos_q = torch.arange(L, device=q.device) + S - L
    pos_k = torch.arange(S, device=q.device)
    if alibi_slopes is not None:
        slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[0]
        bias = -(pos_q[:, None] - pos_k[None, :]).abs().to(ft)
        s = s + slopes.to(ft)[:, None, None] * bias
    left, right = window_size
    if causal:
        right = 0
    hidden = torch.zeros(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        hidden |= pos_k[None, :] < pos_q[:, None] - left
    if right >= 0:
        hidden |= pos_k[None, :] > pos_q[:, None] + right
    s = s.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - safe[..., None])
    out = torch.einsum("bhls,bshd->blhd", p, v.to(ft)).to(q.dtype)
    return (out, lse, None) if return_attn_probs else out
