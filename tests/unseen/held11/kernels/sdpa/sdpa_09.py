TRUTH = {'api': 'sdpa', 'bugs': ['the default scaling divides by torch.sqrt(torch.tensor(E, dtype=torch.float32)), a float32 0-d tensor; for float64 inputs the scale is thus rounded to float32 (~3e-8 relative), giving ~1e-8 errors in out and grads on float64 cases that use the default scale with a head dim whose sqrt is not exactly representable (E = 32 cases; E = 16/64 and the explicit-scale case are exact)'], 'kind': 'precision'}
import torch


def _head_attention(q, k, v, bias, keep, scale):
    scores = q @ k.transpose(0, 1)
    if scale is None:
        scores = scores / torch.sqrt(torch.tensor(q.shape[-1], dtype=torch.float32))
    else:
        scores = scores * scale
    if bias is not None:
        scores = scores + bias
    if keep is not None:
        scores = scores.masked_fill(~keep, float('-inf'))
    mx = scores.max(dim=-1, keepdim=True).values
    mx = torch.nan_to_num(mx, neginf=0.0)
    e = torch.exp(scores - mx)
    z = e.sum(dim=-1, keepdim=True)
    z = torch.where(z > 0, z, torch.ones_like(z))
    return (e / z) @ v


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    batch = query.shape[:-3]
    H, L, E = query.shape[-3:]
    Hkv, S = key.shape[-3], key.shape[-2]
    Ev = value.shape[-1]
    groups = H // Hkv if enable_gqa else 1
    dt = torch.float64 if query.dtype == torch.float64 else torch.float32

    q = query.reshape(-1, H, L, E).to(dt)
    k = key.reshape(-1, Hkv, S, E).to(dt)
    v = value.reshape(-1, Hkv, S, Ev).to(dt)
    N = q.shape[0]

    mask = None
    if attn_mask is not None:
        mask = attn_mask.expand(*batch, H, L, S).reshape(N, H, L, S)
    causal = torch.ones(L, S, dtype=torch.bool).tril() if is_causal else None

    rows = []
    for n in range(N):
        heads = []
        for h in range(H):
            kv = h // groups
            keep, bias = causal, None
            if mask is not None:
                if mask.dtype == torch.bool:
                    keep = mask[n, h] if keep is None else keep & mask[n, h]
                else:
                    bias = mask[n, h].to(dt)
            heads.append(_head_attention(q[n, h], k[n, kv], v[n, kv], bias, keep, scale))
        rows.append(torch.stack(heads))
    out = torch.stack(rows)
    return out.reshape(*batch, H, L, Ev).to(query.dtype)
