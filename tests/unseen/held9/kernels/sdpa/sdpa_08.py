TRUTH = {'api': 'sdpa',
 'bugs': ['the float attn_mask is rounded to float16 before being added to the scores; loses ~1e-3 relative on '
          'the bias for float32/float64 inputs with a float mask (float_mask_HLS_grad, float_mask_causal_11LS, '
          'mqa_floatmask_BHLS: out, grads, dmask)'],
 'kind': 'precision'}

import math
import torch


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    dt = query.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    E = query.shape[-1]
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
            s = s + attn_mask.to(torch.float16)
    s = s.masked_fill(~keep, -math.inf)
    m = s.detach().amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    den = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(den > 0, den, torch.ones_like(den))
    out = torch.matmul(p, v)
    return out.to(dt)
