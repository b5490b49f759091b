TRUTH = {'api': 'flex', 'bugs': ['The exp2 of the shifted scores is evaluated in float32, losing precision for float64 inputs; shows on float64.'], 'kind': 'precision'}
import math
import torch

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _bhqk_vmap(fn, n_lead):
    """vmap fn(x?, b, h, q, k) over k, q, h, b (innermost first), like flex does."""
    if n_lead:
        dims = [(0, None, None, None, 0), (0, None, None, 0, None), (0, None, 0, None, None), (0, 0, None, None, None)]
    else:
        dims = [(None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)]
    for d in dims:
        fn = torch.vmap(fn, in_dims=d, out_dims=0)
    return fn


def _tile_state(block_mask, b, h, qb, nkb):
    st = torch.zeros(nkb, dtype=torch.long)  # 0 skip, 1 partial, 2 full
    bb = min(b, block_mask.kv_num_blocks.shape[0] - 1)
    hh = min(h, block_mask.kv_num_blocks.shape[1] - 1)
    n = int(block_mask.kv_num_blocks[bb, hh, qb])
    st[block_mask.kv_indices[bb, hh, qb, :n].long()] = 1
    if block_mask.full_kv_num_blocks is not None:
        n = int(block_mask.full_kv_num_blocks[bb, hh, qb])
        st[block_mask.full_kv_indices[bb, hh, qb, :n].long()] = 2
    return st


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    cdt = torch.float32 if query.dtype == torch.bfloat16 else query.dtype
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    rep = H // Hkv
    k = key.to(cdt).repeat_interleave(rep, 1)
    v = value.to(cdt).repeat_interleave(rep, 1)
    q = query.to(cdt)
    smod = _bhqk_vmap(score_mod, True) if score_mod is not None else None
    mmod = _bhqk_vmap(block_mask.mask_mod, False) if block_mask is not None else None
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
    else:
        QB, KB = L, S
    nkb = (S + KB - 1) // KB
    ball, hall, kall = torch.arange(B), torch.arange(H), torch.arange(S)
    outs, lses = [], []
    for q0 in range(0, L, QB):
        q1 = min(q0 + QB, L)
        qidx = torch.arange(q0, q1)
        s = torch.matmul(q[:, :, q0:q1], k.transpose(-1, -2)) * sc
        if smod is not None:
            s = smod(s, ball, hall, qidx, kall).to(cdt)
        if mmod is not None:
            qb = q0 // QB
            keep = torch.zeros(B, H, q1 - q0, S, dtype=torch.bool)
            mm = mmod(ball, hall, qidx, kall)
            for b in range(B):
                for h in range(H):
                    st = _tile_state(block_mask, b, h, qb, nkb).repeat_interleave(KB)[:S]
                    keep[b, h] = (st == 2) | ((st == 1) & mm[b, h])
            s = s.masked_fill(~keep, -math.inf)
        s2 = s * LOG2E
        m2 = s2.amax(-1, keepdim=True)
        m2 = torch.where(torch.isinf(m2), torch.zeros_like(m2), m2)
        p = torch.exp2((s2 - m2).float()).to(s2.dtype)
        l = p.sum(-1, keepdim=True)
        nz = l > 0
        outs.append(torch.matmul(p, v) / torch.where(nz, l, torch.ones_like(l)))
        lse2 = torch.where(nz, m2 + torch.log2(torch.where(nz, l, torch.ones_like(l))), torch.full_like(l, -math.inf))
        lses.append(lse2.squeeze(-1) * LN2)
    out = torch.cat(outs, 2).to(query.dtype)
    lse = torch.cat(lses, 2)
    if return_lse:
        return out, lse
    return out
