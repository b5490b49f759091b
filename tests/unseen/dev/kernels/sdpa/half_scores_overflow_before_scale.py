"""SDPA port: half-precision QK^T GEMM, then scale + mask + softmax in float32, float32 PV."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the unscaled q.k^T is computed in the input dtype and the scale applied only after the upcast, so in "
        "float16 large-activation inputs overflow to inf before scaling and the output becomes NaN"
    ],
    "kind": "precision",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    dt = query.dtype
    f = torch.float64 if dt == torch.float64 else torch.float32
    sm = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    if enable_gqa and key.size(-3) != query.size(-3):
        n = query.size(-3) // key.size(-3)
        key = key.repeat_interleave(n, dim=-3)
        value = value.repeat_interleave(n, dim=-3)
    qk = torch.matmul(query, key.transpose(-2, -1))
    s = qk.to(f) * sm
    L, S = s.shape[-2:]
    visible = torch.ones(L, S, dtype=torch.bool, device=s.device)
    if is_causal:
        visible = visible.tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            visible = visible & attn_mask
        else:
            s = s + attn_mask.to(f)
    s = s.masked_fill(~visible, float("-inf"))
    row_max = s.amax(dim=-1, keepdim=True).detach()
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    p = torch.exp(s - row_max)
    z = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(z == 0, torch.ones_like(z), z)
    return (p @ value.to(f)).to(dt)
