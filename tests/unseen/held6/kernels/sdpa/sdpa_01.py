"""scaled_dot_product_attention as a tiled online-softmax forward; autograd differentiates through the tiles."""
import math

import torch

TRUTH = {
    'api': 'sdpa',
    'bugs': [
        'is_causal is aligned bottom-right: the tile row positions are shifted by S - L (rows = i + S - L) and the causal early stop uses i1 + S - L, so query i sees keys j <= i + S - L instead of the top-left rule j <= i. Identical when L == S; wrong whenever is_causal and L != S (L < S: queries see too many keys; L > S: the first L - S queries see none and output zeros).',
    ],
    'kind': 'semantic',
}

BLOCK_Q = 128
BLOCK_KV = 32


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    *batch, H, L, E = query.shape
    Hkv, S, Ev = key.shape[-3], key.shape[-2], value.shape[-1]
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(E)
    wd = torch.float64 if query.dtype == torch.float64 else torch.float32
    nb = math.prod(batch)
    q = query.reshape(nb, H, L, E).to(wd)
    k = key.reshape(nb, Hkv, S, E).to(wd)
    v = value.reshape(nb, Hkv, S, Ev).to(wd)
    if enable_gqa and H != Hkv:
        group = H // Hkv
        k = k.repeat_interleave(group, dim=1)  # query head h reads kv head h // group
        v = v.repeat_interleave(group, dim=1)
    keep = bias = None
    if attn_mask is not None:
        full = attn_mask.expand(*batch, H, L, S).reshape(nb, H, L, S)
        if full.dtype == torch.bool:
            keep = full
        else:
            bias = full.to(wd)
    outs = []
    for i0 in range(0, L, BLOCK_Q):
        i1 = min(i0 + BLOCK_Q, L)
        qi = q[:, :, i0:i1]
        rows = torch.arange(i0, i1)[:, None] + (S - L)
        m_i = torch.full((nb, H, i1 - i0, 1), float('-inf'), dtype=wd)
        l_i = torch.zeros(nb, H, i1 - i0, 1, dtype=wd)
        acc = torch.zeros(nb, H, i1 - i0, Ev, dtype=wd)
        kv_end = min(S, i1 + S - L) if is_causal else S  # causal: nothing past the tile's last query
        for j0 in range(0, kv_end, BLOCK_KV):
            j1 = min(j0 + BLOCK_KV, S)
            cols = torch.arange(j0, j1)[None, :]
            s = torch.matmul(qi, k[:, :, j0:j1].transpose(-1, -2)) * sm_scale
            if bias is not None:
                s = s + bias[:, :, i0:i1, j0:j1]
            ok = torch.ones(i1 - i0, j1 - j0, dtype=torch.bool)
            if is_causal:
                ok = ok & (cols <= rows)
            if keep is not None:
                ok = ok & keep[:, :, i0:i1, j0:j1]
            s = s.masked_fill(~ok, float('-inf'))
            # the running max is only a shift: the result does not depend on it, so it carries no gradient
            m_new = torch.maximum(m_i, s.amax(-1, keepdim=True)).detach()
            shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - shift)
            corr = torch.exp(m_i - shift)
            l_i = l_i * corr + p.sum(-1, keepdim=True)
            acc = acc * corr + torch.matmul(p, v[:, :, j0:j1])
            m_i = m_new
        l_safe = torch.where(l_i > 0, l_i, torch.ones_like(l_i))
        outs.append(acc / l_safe)
    out = torch.cat(outs, dim=2)
    return out.to(query.dtype).reshape(*batch, H, L, Ev)
