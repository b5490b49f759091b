"""flash_attn_func equivalent with tanh soft-capping, ALiBi and windows, written with differentiable torch ops."""
import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "soft-capping is applied to the raw q.k dot product and the softmax scale is multiplied in afterwards "
        "(scale * softcap * tanh(qk / softcap)); it must cap the already-scaled score: softcap * tanh(scale * qk / softcap)",
    ],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    out_dtype = q.dtype
    wt = torch.float64 if out_dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    qh = q.to(wt).permute(0, 2, 1, 3)
    kh = k.to(wt).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, dim=1)
    vh = v.to(wt).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, dim=1)

    raw = qh @ kh.transpose(-1, -2)
    if softcap > 0:
        scores = scale * (softcap * torch.tanh(raw / softcap))
    else:
        scores = scale * raw

    qpos = torch.arange(L, device=q.device).view(L, 1) + (S - L)
    kpos = torch.arange(S, device=q.device).view(1, S)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(wt).reshape(-1, H, 1, 1)
        scores = scores - slopes * (qpos - kpos).abs().to(wt)
    left, right = window_size
    if causal:
        right = 0
    allowed = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        allowed = allowed & (kpos >= qpos - left)
    if right >= 0:
        allowed = allowed & (kpos <= qpos + right)
    scores = scores.masked_fill(~allowed, float("-inf"))

    top = scores.detach().amax(dim=-1, keepdim=True)
    top = top.masked_fill(top == float("-inf"), 0.0)
    w = torch.exp(scores - top)
    z = w.sum(dim=-1, keepdim=True)
    w = w / z.masked_fill(z == 0, 1.0)
    out = (w @ vh).permute(0, 2, 1, 3).to(out_dtype)
    if return_attn_probs:
        lse = (top + torch.log(z)).squeeze(-1).float().detach()
        return out, lse, None
    return out
