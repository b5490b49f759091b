"""Dense SDPA with GQA done by expanding the kv heads to the query head count before the matmul.

Everything else is plain: float32 softmax, masks, upper-left causal.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "with enable_gqa the kv heads are expanded with repeat (tiling) instead of repeat_interleave, so query head "
        "h reads kv head h % Hkv instead of h // (H / Hkv)"
    ],
    "kind": "semantic",
}


def _expand_kv(t, n_rep):
    # (..., Hkv, S, E) -> (..., Hkv * n_rep, S, E)
    reps = [1] * t.dim()
    reps[-3] = n_rep
    return t.repeat(*reps)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0:
        raise NotImplementedError
    dt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(dt), key.to(dt), value.to(dt)
    if enable_gqa:
        n_rep = q.shape[-3] // k.shape[-3]
        if n_rep > 1:
            k = _expand_kv(k, n_rep)
            v = _expand_kv(v, n_rep)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        s = s + attn_mask.to(dt)
    ok = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device)
    if is_causal:
        ok = torch.tril(ok)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        ok = ok & attn_mask
    s = s.masked_fill(~ok, -math.inf)
    mx = s.max(dim=-1, keepdim=True).values
    mx = mx.masked_fill(~torch.isfinite(mx), 0.0).detach()
    p = torch.exp(s - mx)
    denom = p.sum(-1, keepdim=True)
    p = p / denom.masked_fill(denom == 0, 1.0)
    return (p @ v).to(query.dtype)
