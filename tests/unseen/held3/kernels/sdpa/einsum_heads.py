"""SDPA written with einsum over explicit (batch, head) axes, with grouped-query heads expanded to full width."""
import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "with enable_gqa the kv heads are expanded with Tensor.repeat (tiling), so query head h reads kv head h % Hkv; "
        "SDPA maps query head h to kv head h // (H // Hkv) (repeat_interleave)",
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    odt = query.dtype
    cdt = torch.float64 if odt == torch.float64 else torch.float32
    q = query.to(cdt)
    k = key.to(cdt)
    v = value.to(cdt)
    Hq, Hk = q.size(-3), k.size(-3)
    if enable_gqa and Hk != Hq:
        reps = [1] * k.dim()
        reps[-3] = Hq // Hk
        k = k.repeat(*reps)
        v = v.repeat(*reps)
    batch = torch.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3])
    q = q.expand(*batch, *q.shape[-3:]).reshape(-1, *q.shape[-3:])
    k = k.expand(*batch, *k.shape[-3:]).reshape(-1, *k.shape[-3:])
    v = v.expand(*batch, *v.shape[-3:]).reshape(-1, *v.shape[-3:])
    L, S = q.size(-2), k.size(-2)
    sm = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale

    s = torch.einsum("nhld,nhsd->nhls", q, k) * sm
    s = s.reshape(*batch, *s.shape[-3:])
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = s.masked_fill(~attn_mask, float("-inf"))
        else:
            s = s + attn_mask.to(cdt)
    if is_causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    s = s.reshape(-1, *s.shape[-3:])
    mx = s.amax(dim=-1, keepdim=True).detach()
    e = torch.exp(s - mx.masked_fill(torch.isinf(mx), 0.0))
    den = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(den > 0, den, torch.ones_like(den))
    out = torch.einsum("nhls,nhsd->nhld", p, v)
    return out.reshape(*batch, *out.shape[-3:]).to(odt)
