import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "Online softmax subtracts the running max without guarding the all-masked case: p = exp2(z - m_new), corr = exp2(m - m_new) with m_new = -inf for a row that has seen no visible key yet, giving (-inf) - (-inf) = NaN. Rows with no visible key (fully masked rows of a bool or float attn_mask), or whose first key tile is fully masked, come out NaN (and poison the gradients) instead of zeros."
    ],
    "kind": "semantic"
}


BLOCK = 32
LOG2E = 1.4426950408889634


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    E = query.size(-1)
    L, S = query.size(-2), key.size(-2)
    qk_scale = (scale if scale is not None else 1.0 / math.sqrt(E)) * LOG2E
    acc_dt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(acc_dt), key.to(acc_dt), value.to(acc_dt)
    H, Hkv = q.size(-3), k.size(-3)
    if enable_gqa and H != Hkv:
        g = H // Hkv
        lead = k.shape[:-3]
        k = k.unsqueeze(-3).expand(*lead, Hkv, g, S, k.size(-1)).reshape(*lead, H, S, k.size(-1))
        v = v.unsqueeze(-3).expand(*lead, Hkv, g, S, v.size(-1)).reshape(*lead, H, S, v.size(-1))

    keep = None
    bias = None
    if is_causal:
        keep = torch.arange(L)[:, None] >= torch.arange(S)[None, :]
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            bias = attn_mask.to(acc_dt) * LOG2E

    qs = q * qk_scale
    shape = torch.broadcast_shapes(q.shape[:-1], k.shape[:-2] + (L,))
    m = torch.full(shape + (1,), float('-inf'), dtype=acc_dt)
    l = torch.zeros(shape + (1,), dtype=acc_dt)
    acc = torch.zeros(shape + (v.size(-1),), dtype=acc_dt)
    for j0 in range(0, S, BLOCK):
        j1 = min(j0 + BLOCK, S)
        z = torch.matmul(qs, k[..., j0:j1, :].transpose(-1, -2))
        if bias is not None:
            z = z + bias[..., j0:j1]
        if keep is not None:
            z = z.masked_fill(~keep[..., j0:j1], float('-inf'))
        m_new = torch.maximum(m, z.detach().amax(-1, keepdim=True))
        p = torch.exp2(z - m_new)
        corr = torch.exp2(m - m_new)
        l = l * corr + p.sum(-1, keepdim=True)
        acc = (acc * corr + torch.matmul(p, v[..., j0:j1, :])).to(acc.dtype)
        m = m_new
    out = acc / torch.where(l == 0, torch.ones_like(l), l)
    return out.to(query.dtype)
