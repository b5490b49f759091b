"""Grid-style port of the FlashAttention forward: one (batch, head) program at a time, writing into preallocated
out / softmax_lse buffers like the CUDA kernel does."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the softmax_lse buffer is allocated in the input dtype and only cast to float32 on return, so for "
        "bfloat16/float16 inputs the lse is rounded to 8/11 bits (errors ~1e-2 on lse values of ~5-10)"
    ],
    "kind": "precision",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    left, right = window_size
    if causal:
        right = 0
    out = torch.empty_like(q)
    softmax_lse = torch.empty((B, H, L), dtype=q.dtype, device=q.device)
    i = torch.arange(L, device=q.device)[:, None] + S - L
    j = torch.arange(S, device=q.device)[None, :]
    visible = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    dist = (i - j).abs().to(acc)
    outs = []
    for b in range(B):
        per_head = []
        for h in range(H):
            hk = h // (H // Hkv)
            s = q[b, :, h].to(acc) @ k[b, :, hk].to(acc).T * scale
            if softcap > 0.0:
                s = softcap * torch.tanh(s / softcap)
            if alibi_slopes is not None:
                slope = alibi_slopes[h] if alibi_slopes.dim() == 1 else alibi_slopes[b, h]
                s = s - slope.to(acc) * dist
            s = s.masked_fill(~visible, -math.inf)
            m = s.amax(-1, keepdim=True).detach()
            m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
            e = torch.exp(s - m)
            denom = e.sum(-1, keepdim=True)
            o = (e @ v[b, :, hk].to(acc)) / torch.where(denom > 0, denom, torch.ones_like(denom))
            per_head.append(o)
            with torch.no_grad():
                row_lse = torch.where(denom > 0, m + torch.log(denom), torch.full_like(denom, -math.inf))
                softmax_lse[b, h] = row_lse.squeeze(-1)
        outs.append(torch.stack(per_head, dim=1))
    out = torch.stack(outs, dim=0).to(q.dtype)
    if return_attn_probs:
        lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        return out, softmax_lse.to(lse_dtype), None
    return out
