"""Dense SDPA: upcast to float32, fold causal and attn_mask into one visibility mask, guarded softmax, one matmul.

Autograd runs through the torch ops; rows that see no key come out as zeros with zero gradients.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [],
    "kind": "correct",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported by this kernel")
    out_dtype = query.dtype
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(acc), key.to(acc), value.to(acc)

    n_heads, n_kv = q.shape[-3], k.shape[-3]
    if enable_gqa and n_heads != n_kv:
        group = n_heads // n_kv
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)

    L, S = q.shape[-2], k.shape[-2]
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1)) * sm_scale

    keep = None
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            scores = scores + attn_mask.to(acc)
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))

    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()
    num = torch.exp(scores - row_max)
    den = num.sum(dim=-1, keepdim=True)
    probs = num / torch.where(den > 0, den, torch.ones_like(den))
    return torch.matmul(probs, v).to(out_dtype)
