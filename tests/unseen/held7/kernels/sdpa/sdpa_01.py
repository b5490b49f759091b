import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "A float attn_mask is added to the raw q.k scores before the softmax scale is applied (s = (q.k + mask) * scale) instead of after it (s = scale*q.k + mask), so the mask is effectively multiplied by scale. Wrong out, grads and mask gradient for every float-mask case; bool masks and no-mask cases are unaffected.",
        "The float attn_mask is converted with attn_mask.float() (float32) instead of to the compute dtype, so for float64 inputs the mask values are rounded to float32 before being added; output and gradients of float64 float-mask cases carry ~1e-8 relative error."
    ],
    "kind": "two"
}



def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    L, E = query.shape[-2], query.shape[-1]
    S = key.shape[-2]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)

    s = torch.matmul(q, k.transpose(-2, -1))
    valid = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        valid = torch.tril(valid)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            valid = valid & attn_mask
        else:
            s = s + attn_mask.float()
    s = s.masked_fill(~valid, float('-inf')) * sc

    m = s.detach().amax(-1, keepdim=True)
    m = torch.nan_to_num(m, nan=0.0, posinf=0.0, neginf=0.0)
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    p = e / torch.where(den > 0, den, torch.ones_like(den))
    return torch.matmul(p, v).to(query.dtype)
