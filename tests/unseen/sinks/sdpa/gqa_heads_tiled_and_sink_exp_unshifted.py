"""Dense SDPA with sinks, stable softmax written by hand: subtract the row max from the scores, exponentiate, and add
each head's exp(sink) to the row's denominator.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "with enable_gqa the kv heads are tiled (key.repeat) instead of interleaved, so query head h reads kv head "
        "h % Hkv instead of h // (H / Hkv)",
        "the sink enters the denominator as exp(sink) while the key terms are exp(s - rowmax), so the sink is weighted "
        "by an extra factor exp(rowmax) (right only when the row max is 0)",
    ],
    "kind": "two",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("no dropout")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    H, Hkv = q.shape[-3], k.shape[-3]
    if enable_gqa and Hkv != H:
        reps = [1] * k.dim()
        reps[-3] = H // Hkv
        k, v = k.repeat(*reps), v.repeat(*reps)
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    s = q @ k.transpose(-2, -1) * scale
    if is_causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask.to(cdt)

    mx = s.amax(-1, keepdim=True).detach()
    mx = torch.where(mx == float("-inf"), torch.zeros_like(mx), mx)
    num = torch.exp(s - mx)
    den = num.sum(-1, keepdim=True)
    if sinks is not None:
        den = den + torch.exp(sinks.to(cdt)).view(H, 1, 1)
    den = torch.where(den == 0, torch.ones_like(den), den)
    return ((num / den) @ v).to(query.dtype)
