TRUTH = {
    "api": "sdpa",
    "bugs": [
        "enable_gqa maps query head h to kv head h % Hkv (interleaved) instead of h // (H // Hkv); wrong whenever H != Hkv (gqa_6_2_causal, mqa is unaffected only because Hkv=1)"
    ],
    "kind": "semantic"
}

import math
import torch


def _head(qh, kh, vh, allowed, bias, sc):
    s = (qh @ kh.t()) * sc
    if bias is not None:
        s = s + bias
        allowed = allowed & torch.isfinite(bias)
    rows = allowed.any(dim=-1)
    s = torch.where(allowed, s, torch.full_like(s, -1e30))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    p = torch.exp(s - lse) * allowed
    out = p @ vh
    return out * rows[:, None]


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    E = query.shape[-1]
    H, L = query.shape[-3], query.shape[-2]
    Hkv, S = key.shape[-3], key.shape[-2]
    Ev = value.shape[-1]
    batch = query.shape[:-3]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    cdt = torch.float32 if query.dtype in (torch.bfloat16, torch.float16) else query.dtype
    q = query.reshape(-1, H, L, E).to(cdt)
    k = key.reshape(-1, Hkv, S, E).to(cdt)
    v = value.reshape(-1, Hkv, S, Ev).to(cdt)
    N = q.shape[0]
    grp = H // Hkv if enable_gqa else 1
    base = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        base = torch.tril(base)
    bmask = None
    fmask = None
    if attn_mask is not None:
        full = attn_mask.expand(*batch, H, L, S).reshape(N, H, L, S)
        if attn_mask.dtype == torch.bool:
            bmask = full
        else:
            fmask = full.to(cdt)
    outs = []
    for n in range(N):
        row = []
        for h in range(H):
            hk = h % Hkv
            allowed = base if bmask is None else base & bmask[n, h]
            bias = None if fmask is None else fmask[n, h]
            row.append(_head(q[n, h], k[n, hk], v[n, hk], allowed, bias, sc))
        outs.append(torch.stack(row))
    out = torch.stack(outs).reshape(*batch, H, L, Ev)
    return out.to(query.dtype)
