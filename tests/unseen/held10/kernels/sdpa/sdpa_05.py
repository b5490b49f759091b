TRUTH = {'api': 'sdpa', 'bugs': ['Masked scores are filled with finfo.min instead of -inf, so a query whose keys are all masked gets a uniform average of V instead of zeros; shows on the mask cases with fully masked rows.'], 'kind': 'semantic'}
import math
import torch


def _expand_kv(x, H):
    Hkv = x.shape[-3]
    if Hkv == H:
        return x
    return x.repeat_interleave(H // Hkv, dim=-3)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    H, L, E = query.shape[-3], query.shape[-2], query.shape[-1]
    S = key.shape[-2]
    cdt = torch.float32 if query.dtype == torch.bfloat16 else query.dtype
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    if enable_gqa:
        key, value = _expand_kv(key, H), _expand_kv(value, H)
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    s = torch.matmul(q, k.transpose(-1, -2)) * sc
    keep = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        keep = torch.tril(keep)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            s = s + attn_mask.to(cdt)
            keep = keep & (attn_mask != -math.inf)
    keep = keep.expand(s.shape)
    s = s.masked_fill(~keep, torch.finfo(cdt).min)
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    den = p.sum(-1, keepdim=True)
    p = p / torch.where(den > 0, den, torch.ones_like(den))
    out = torch.matmul(p, v)
    return out.to(query.dtype)
