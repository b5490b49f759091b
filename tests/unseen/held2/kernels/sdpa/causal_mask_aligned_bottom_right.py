"""Dense SDPA that builds one additive bias (float mask, bool mask, causal) and runs a guarded softmax over it."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the causal mask is aligned bottom-right (query i sees keys j <= i + S - L); "
        "sdpa's is_causal is aligned top-left (j <= i), so results differ whenever L != S"
    ],
    "kind": "semantic",
}


def _causal_bias(L, S, dtype, device):
    keep = torch.ones(L, S, dtype=torch.bool, device=device).tril(diagonal=S - L)
    bias = torch.zeros(L, S, dtype=dtype, device=device)
    return bias.masked_fill(~keep, float("-inf"))


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p > 0 is not implemented")
    in_dtype = query.dtype
    acc_dtype = torch.float64 if in_dtype == torch.float64 else torch.float32
    L, E = query.shape[-2], query.shape[-1]
    S = key.shape[-2]
    sm_scale = (1.0 / math.sqrt(E)) if scale is None else scale

    q = query.to(acc_dtype)
    k = key.to(acc_dtype)
    v = value.to(acc_dtype)
    if enable_gqa and q.dim() >= 3:
        groups = q.shape[-3] // k.shape[-3]
        if groups > 1:
            k = torch.repeat_interleave(k, groups, dim=-3)
            v = torch.repeat_interleave(v, groups, dim=-3)

    bias = torch.zeros(L, S, dtype=acc_dtype, device=q.device)
    if is_causal:
        bias = bias + _causal_bias(L, S, acc_dtype, q.device)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(~attn_mask, float("-inf"))
        else:
            bias = bias + attn_mask.to(acc_dtype)

    s = q @ k.transpose(-2, -1) * sm_scale + bias
    m = s.amax(dim=-1, keepdim=True).detach()
    m = m.masked_fill(m == float("-inf"), 0.0)
    e = (s - m).exp()
    z = e.sum(dim=-1, keepdim=True)
    o = (e @ v) / torch.where(z > 0, z, torch.ones_like(z))
    return o.to(in_dtype)
