"""Grouped-query SDPA with sinks that never materialises repeated K/V: queries are viewed as (kv_head, group) and
scored against their shared kv head with one einsum; the per-head sinks are viewed the same way.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["with enable_gqa the sinks are viewed as (group, kv_head) and transposed instead of (kv_head, group), so "
             "query head h = kv*G + g gets sinks[g*Hkv + kv] rather than sinks[h] whenever Hkv > 1 and G > 1"],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p != 0.0:
        raise NotImplementedError("dropout is not implemented")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    *lead, H, L, E = query.shape
    Hkv, S = key.shape[-3], key.shape[-2]
    G = H // Hkv if enable_gqa else 1
    if not enable_gqa and Hkv != H:
        raise ValueError("key/value heads differ from query heads; pass enable_gqa=True")
    scale = 1.0 / math.sqrt(E) if scale is None else scale

    q = query.to(cdt).reshape(*lead, Hkv, G, L, E)
    k = key.to(cdt)
    v = value.to(cdt)
    s = torch.einsum("...kgle,...kse->...kgls", q, k) * scale
    s = s.reshape(*lead, H, L, S)
    if is_causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = s.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            s = s + attn_mask.to(cdt)

    if sinks is not None:
        per_head = sinks.to(cdt).view(G, Hkv).t().reshape(H)
        sink = per_head.view(H, 1, 1).expand(*s.shape[:-1], 1)
    else:
        sink = torch.full((*s.shape[:-1], 1), float("-inf"), dtype=cdt, device=s.device)
    logits = torch.cat([s, sink], dim=-1)
    mx = logits.max(dim=-1, keepdim=True).values.detach()
    mx = mx.masked_fill(mx == float("-inf"), 0.0)
    e = (logits - mx).exp()
    tot = e.sum(dim=-1, keepdim=True)
    p = e[..., :S] / tot.masked_fill(tot == 0, 1.0)
    out = torch.einsum("...kgls,...ksd->...kgld", p.reshape(*lead, Hkv, G, L, S), v)
    return out.reshape(*lead, H, L, value.shape[-1]).to(query.dtype)
