TRUTH = {'api': 'sdpa',
 'bugs': ["the default scale is computed from value's head dim (1/sqrt(Ev)) instead of query's E; wrong whenever "
          'scale is None and Ev != E (sdpa case Ev!=E: out and all grads)'],
 'kind': 'semantic'}

import math
import torch


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    dt = query.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    E = value.shape[-1]
    L, S = query.shape[-2], key.shape[-2]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    q, k, v = query.to(cd), key.to(cd), value.to(cd)
    H, Hkv = q.shape[-3], k.shape[-3]
    if enable_gqa and H != Hkv:
        k = k.repeat_interleave(H // Hkv, dim=-3)
        v = v.repeat_interleave(H // Hkv, dim=-3)
    s = torch.matmul(q, k.transpose(-2, -1)) * sc
    keep = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        keep = torch.tril(keep)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            s = s + attn_mask.to(cd)
    s = s.masked_fill(~keep, -math.inf)
    m = s.detach().amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    den = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(den > 0, den, torch.ones_like(den))
    out = torch.matmul(p, v)
    return out.to(dt)
