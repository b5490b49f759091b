TRUTH = {'api': 'flex',
 'bugs': ['the key-chunk merge weights exp(lse_c - max) are computed in float16, so out and lse get ~1e-3 '
          'relative error for float32/float64 inputs'],
 'kind': 'precision'}

import math
import torch

CHUNK = 48


def _lookup(num, idx, qblk, kblk):
    # num (Bm, Hm, nq), idx (Bm, Hm, nq, m); qblk (L,), kblk (n,) -> (Bm, Hm, L, n) bool
    rows_n = num[:, :, qblk].long().unsqueeze(-1)
    rows_i = idx[:, :, qblk].long()
    slot = torch.arange(idx.shape[-1])
    hit = (rows_i.unsqueeze(-1) == kblk.view(1, 1, 1, 1, -1)) & (slot.view(-1, 1) < rows_n.unsqueeze(-1))
    return hit.any(dim=-2)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    dt = query.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    g = H // Hkv if enable_gqa else 1
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    q = query.to(cd).reshape(B, H // g, g, L, E)
    k = key.to(cd).unsqueeze(2)
    v = value.to(cd).unsqueeze(2)
    bi = torch.arange(B).view(B, 1, 1, 1)
    hi = torch.arange(H).view(1, H, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    o_parts, l_parts = [], []
    for j0 in range(0, S, CHUNK):
        j1 = min(S, j0 + CHUNK)
        s = torch.matmul(q, k[..., j0:j1, :].transpose(-1, -2)).reshape(B, H, L, j1 - j0) * sc
        ki = torch.arange(j0, j1).view(1, 1, 1, -1)
        if score_mod is not None:
            s = score_mod(s, bi, hi, qi, ki).to(cd)
        if block_mask is not None:
            QB, KB = block_mask.BLOCK_SIZE
            qblk = torch.arange(L) // QB
            kblk = torch.arange(j0, j1) // KB
            keep = _lookup(block_mask.kv_num_blocks, block_mask.kv_indices, qblk, kblk)
            keep = keep & block_mask.mask_mod(bi, hi, qi, ki)
            if block_mask.full_kv_num_blocks is not None:
                keep = keep | _lookup(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, qblk, kblk)
            s = s.masked_fill(~keep, -math.inf)
        m = s.amax(dim=-1, keepdim=True)
        m_use = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m_use)
        den = e.sum(dim=-1, keepdim=True)
        den_use = torch.where(den > 0, den, torch.ones_like(den))
        pv = torch.matmul(e.reshape(B, H // g, g, L, -1), v[..., j0:j1, :]).reshape(B, H, L, -1)
        o_parts.append(pv / den_use)
        l_parts.append(torch.where(den > 0, m_use + torch.log(den_use), torch.full_like(den, -math.inf)))
    ls = torch.stack(l_parts)
    top = ls.amax(dim=0)
    top_use = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    w = torch.exp((ls - top_use).half())
    tot = w.sum(dim=0)
    tot_use = torch.where(tot > 0, tot, torch.ones_like(tot))
    out = (torch.stack(o_parts) * w).sum(dim=0) / tot_use
    lse = torch.where(tot > 0, top_use + torch.log(tot_use), torch.full_like(tot, -math.inf)).squeeze(-1)
    out = out.to(dt)
    if return_lse:
        return out, lse
    return out
