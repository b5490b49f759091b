TRUTH = {'api': 'flex', 'bugs': ['the index grids for score_mod come from meshgrid(arange(L), arange(S), indexing="ij") but are unpacked as (kv_grid, q_grid), so score_mod receives the key index as q_idx and the query index as kv_idx; wrong for score_mods that are not symmetric in q and kv (relbias_scoremod, captured_bias)', 'the lse is computed as m + log(l.clamp_min(tiny)) to avoid log(0), so rows that see no key get a large finite negative lse (about -87 / -708) instead of -inf (docmask_emptyrows)'], 'kind': 'two'}
import math

import torch


def _dense_allowed(bm, B, H, L, S):
    qbs, kbs = bm.BLOCK_SIZE
    nkb = bm.kv_indices.shape[-1]
    col = torch.arange(nkb)
    listed = torch.zeros(bm.kv_indices.shape, dtype=torch.bool).scatter_(
        -1, bm.kv_indices.long(), col < bm.kv_num_blocks.long()[..., None])
    if bm.full_kv_num_blocks is not None:
        full = torch.zeros(bm.full_kv_indices.shape, dtype=torch.bool).scatter_(
            -1, bm.full_kv_indices.long(), col < bm.full_kv_num_blocks.long()[..., None])
    else:
        full = torch.zeros_like(listed)
    rq = torch.arange(L) // qbs
    rk = torch.arange(S) // kbs
    listed = listed[:, :, rq][:, :, :, rk]
    full = full[:, :, rq][:, :, :, rk]
    inner = bm.mask_mod(torch.arange(B)[:, None, None, None], torch.arange(H)[None, :, None, None],
                        torch.arange(L)[None, None, :, None], torch.arange(S)[None, None, None, :])
    return (full | (listed & inner)).expand(B, H, L, S)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[-3], key.shape[-2]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    q = query.to(ct)
    k = key.to(ct)
    v = value.to(ct)
    if enable_gqa and H != Hkv:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)

    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if score_mod is not None:
        kv_grid, q_grid = torch.meshgrid(torch.arange(L), torch.arange(S), indexing='ij')
        b_grid = torch.arange(B).view(B, 1, 1, 1)
        h_grid = torch.arange(H).view(1, H, 1, 1)
        s = score_mod(s, b_grid, h_grid, q_grid, kv_grid).to(ct)
    if block_mask is not None:
        s = s.masked_fill(~_dense_allowed(block_mask, B, H, L, S), float('-inf'))

    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    out = torch.matmul(e, v) / torch.where(l > 0, l, torch.ones_like(l))
    lse = (m + torch.log(l.clamp_min(torch.finfo(ct).tiny))).squeeze(-1)
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
