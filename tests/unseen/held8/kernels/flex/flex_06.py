TRUTH = {
    "api": "flex",
    "bugs": [
        "full blocks (full_kv_indices) are ignored: only kv_indices partial blocks are treated as visible; keys in full blocks are hidden on every block-mask case"
    ],
    "kind": "semantic"
}

import math
import torch


def _block_table(num, idx, nk):
    r = torch.arange(idx.shape[-1])
    valid = r < num[..., None]
    hit = (idx.long()[..., None] == torch.arange(nk)) & valid[..., None]
    return hit.any(-2)


def _allowed(bm, B, H, L, S):
    QB, KB = bm.BLOCK_SIZE
    nk = (S + KB - 1) // KB
    part = _block_table(bm.kv_num_blocks, bm.kv_indices, nk)
    if bm.full_kv_num_blocks is not None:
        full = _block_table(bm.full_kv_num_blocks, bm.full_kv_indices, nk)
    else:
        full = torch.zeros_like(part)
    expand = lambda t: t.repeat_interleave(QB, -2)[..., :L, :].repeat_interleave(KB, -1)[..., :S]
    part_t = expand(part)
    full_t = expand(full)
    b = torch.arange(part_t.shape[0]).view(-1, 1, 1, 1)
    h = torch.arange(part_t.shape[1]).view(1, -1, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    ki = torch.arange(S).view(1, 1, 1, S)
    mm = bm.mask_mod(b, h, qi, ki)
    ok = part_t & mm
    return ok.expand(B, H, L, S)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q = query.to(cdt)
    k = key.to(cdt)
    v = value.to(cdt)
    if Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * sc
    if score_mod is not None:
        b = torch.arange(B).view(B, 1, 1, 1)
        h = torch.arange(H).view(1, H, 1, 1)
        qi = torch.arange(L).view(1, 1, L, 1)
        ki = torch.arange(S).view(1, 1, 1, S)
        s = score_mod(s, b, h, qi, ki).to(cdt).expand(B, H, L, S)
    if block_mask is not None:
        ok = _allowed(block_mask, B, H, L, S)
        s = s.masked_fill(~ok, float('-inf'))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    out = torch.matmul(p, v) / torch.where(l > 0, l, torch.ones_like(l))
    lse = (m + torch.log(l)).squeeze(-1)
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
