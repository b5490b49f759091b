TRUTH = {
    "api": "sdpa",
    "bugs": [
        "P and V are rounded to bfloat16 before P@V (fp32 accumulate) for every input dtype; float32/float64 outputs and gradients lose precision"
    ],
    "kind": "precision"
}

import math
import torch


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    E = query.shape[-1]
    L, S = query.shape[-2], key.shape[-2]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    cdt = torch.float32 if query.dtype in (torch.bfloat16, torch.float16) else query.dtype
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    H, Hkv = q.shape[-3], k.shape[-3]
    if enable_gqa and H != Hkv:
        rep = H // Hkv
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    s = torch.matmul(q, k.transpose(-1, -2)) * sc
    keep = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if is_causal:
        keep = torch.tril(keep)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            s = s + attn_mask.to(cdt)
    s = s.masked_fill(~keep, float('-inf'))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(l > 0, l, torch.ones_like(l))
    out = torch.matmul(p.to(torch.bfloat16), v.to(torch.bfloat16)).to(cdt)
    return out.to(query.dtype)
