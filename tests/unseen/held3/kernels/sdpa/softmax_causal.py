"""SDPA using torch.softmax on an explicitly built boolean keep-mask, with fully masked rows zeroed."""
import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "is_causal builds the keep-mask with tril(diagonal=S-L), i.e. bottom-right aligned (query i sees keys j <= i + S - L); "
        "SDPA's is_causal is top-left aligned (j <= i), so results differ whenever L != S",
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    dtype = query.dtype
    acc_t = torch.float64 if dtype == torch.float64 else torch.float32
    q = query.to(acc_t)
    k = key.to(acc_t)
    v = value.to(acc_t)
    if enable_gqa and k.size(-3) != q.size(-3):
        n_rep = q.size(-3) // k.size(-3)
        k = torch.repeat_interleave(k, n_rep, dim=-3)
        v = torch.repeat_interleave(v, n_rep, dim=-3)
    L, S = q.size(-2), k.size(-2)
    sm_scale = scale if scale is not None else q.size(-1) ** -0.5

    logits = (q @ k.transpose(-1, -2)) * sm_scale
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(diagonal=S - L)
        logits = logits.masked_fill(~keep, -math.inf)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            logits = logits.masked_fill(~attn_mask, -math.inf)
        else:
            logits = logits + attn_mask.to(acc_t)
    dead = torch.isneginf(logits).all(dim=-1, keepdim=True)
    probs = torch.softmax(logits.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    return (probs @ v).to(dtype)
