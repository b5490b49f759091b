TRUTH = {'api': 'sdpa',
 'bugs': ['attn_mask is cast to the query dtype before use, so a boolean mask becomes an additive 0/1 float bias: '
          'masked-out keys are not removed and allowed keys get +1; wrong for every bool attn_mask '
          '(bool_mask_B1LS_emptyrows, twobatch_boolLS_scale, bool_causal_L!=S)'],
 'kind': 'semantic'}

import math
import torch


def _head(qh, kh, vh, bias_h, keep_h, sc):
    s = torch.matmul(qh.double(), kh.double().t()) * sc
    if bias_h is not None:
        s = s + bias_h.double()
    s = s.masked_fill(~keep_h, -math.inf)
    seen = keep_h.any(dim=-1, keepdim=True)
    s = torch.where(seen, s, torch.zeros_like(s))
    p = torch.softmax(s, dim=-1) * seen
    return torch.matmul(p.to(vh.dtype), vh)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    dt = query.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    batch = query.shape[:-3]
    H, L, E = query.shape[-3:]
    Hkv, S = key.shape[-3], key.shape[-2]
    Ev = value.shape[-1]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    if attn_mask is not None:
        attn_mask = attn_mask.to(dt)
    N = 1
    for d in batch:
        N *= d
    q = query.reshape(N, H, L, E).to(cd)
    k = key.reshape(N, Hkv, S, E).to(cd)
    v = value.reshape(N, Hkv, S, Ev).to(cd)
    group = H // Hkv if enable_gqa else 1
    i = torch.arange(L).unsqueeze(1)
    j = torch.arange(S).unsqueeze(0)
    keep = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        keep = j - i <= 0
    keep = keep.expand(batch + (H, L, S))
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            bias = attn_mask.expand(batch + (H, L, S)).reshape(N, H, L, S)
            keep = keep & ~torch.isneginf(attn_mask)
    keep = keep.expand(batch + (H, L, S)).reshape(N, H, L, S)
    rows = []
    for n in range(N):
        heads = []
        for h in range(H):
            kv = h // group
            bh = None if bias is None else bias[n, h]
            heads.append(_head(q[n, h], k[n, kv], v[n, kv], bh, keep[n, h], sc))
        rows.append(torch.stack(heads))
    out = torch.stack(rows).reshape(batch + (H, L, Ev))
    return out.to(dt)
