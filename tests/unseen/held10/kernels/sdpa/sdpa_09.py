TRUTH = {'api': 'sdpa', 'bugs': ['The key-block count uses floor division (S // BK), so the trailing partial key block is never visited; shows whenever S is not a multiple of 32 (e.g. S=100, 130, 150, 90).'], 'kind': 'semantic'}
import math
import torch

BQ = 64
BK = 32


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    *bd, H, L, E = query.shape
    Hkv, S, Ev = key.shape[-3], key.shape[-2], value.shape[-1]
    cdt = torch.float32 if query.dtype == torch.bfloat16 else query.dtype
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    g = H // Hkv if enable_gqa else 1
    hidx = torch.arange(H) // g
    q = query.to(cdt)
    k = key.to(cdt).index_select(-3, hidx)
    v = value.to(cdt).index_select(-3, hidx)
    allow, bias = None, None
    if attn_mask is not None:
        if attn_mask.is_floating_point():
            bias = attn_mask.to(cdt)
        else:
            allow = attn_mask
    nblk = S // BK
    outs = []
    for i0 in range(0, L, BQ):
        i1 = min(i0 + BQ, L)
        qi = q[..., i0:i1, :]
        rows = torch.arange(i0, i1)[:, None]
        m = torch.full((*bd, H, i1 - i0, 1), -math.inf, dtype=cdt)
        l = torch.zeros((*bd, H, i1 - i0, 1), dtype=cdt)
        acc = torch.zeros((*bd, H, i1 - i0, Ev), dtype=cdt)
        for jb in range(nblk):
            j0 = jb * BK
            j1 = min(j0 + BK, S)
            if is_causal and j0 > i1 - 1:
                break
            s = torch.matmul(qi, k[..., j0:j1, :].transpose(-1, -2)) * sc
            ok = torch.ones(i1 - i0, j1 - j0, dtype=torch.bool)
            if is_causal:
                ok = ok & (torch.arange(j0, j1)[None, :] <= rows)
            if bias is not None:
                bb = bias[..., i0:i1, j0:j1]
                s = s + bb
                ok = ok & (bb != -math.inf)
            if allow is not None:
                ok = ok & allow[..., i0:i1, j0:j1]
            s = s.masked_fill(~ok, -math.inf)
            m_new = torch.maximum(m, s.detach().amax(-1, keepdim=True))
            m_use = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_use)
            p = torch.exp(s - m_use)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + torch.matmul(p, v[..., j0:j1, :])
            m = m_new
        outs.append(acc / torch.where(l > 0, l, torch.ones_like(l)))
    out = torch.cat(outs, -2)
    return out.to(query.dtype)
