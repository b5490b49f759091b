TRUTH = {'api': 'flex', 'bugs': ['the per-head lse is stored into a buffer allocated like the query (query.new_empty), so for bfloat16 inputs the returned lse is rounded to bfloat16 (errors up to ~0.016 absolute) instead of being float32; bfloat16 lse fails on every case, float32/float64 are fine'], 'kind': 'precision'}
import math

import torch


def _keep_for_head(bm, b, h, L, S):
    bb = b if bm.kv_num_blocks.size(0) > 1 else 0
    hh = h if bm.kv_num_blocks.size(1) > 1 else 0
    qbs, kbs = bm.BLOCK_SIZE
    nkb = bm.kv_indices.size(-1)
    cols = torch.arange(nkb)
    part = torch.zeros(bm.kv_indices.size(2), nkb, dtype=torch.bool)
    part.scatter_(1, bm.kv_indices[bb, hh].long(), cols < bm.kv_num_blocks[bb, hh].long().unsqueeze(1))
    full = torch.zeros_like(part)
    if bm.full_kv_num_blocks is not None:
        full.scatter_(1, bm.full_kv_indices[bb, hh].long(),
                      cols < bm.full_kv_num_blocks[bb, hh].long().unsqueeze(1))
    rows = torch.arange(L) // qbs
    colk = torch.arange(S) // kbs
    part = part[rows][:, colk]
    full = full[rows][:, colk]
    mm = bm.mask_mod(torch.tensor(b), torch.tensor(h), torch.arange(L).view(-1, 1), torch.arange(S).view(1, -1))
    return full | (part & mm)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.size(1), key.size(2)
    grp = H // Hkv if enable_gqa else 1
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    out = torch.empty(B, H, L, value.size(-1), dtype=query.dtype)
    lse = query.new_empty(B, H, L)
    qi = torch.arange(L).view(-1, 1)
    kj = torch.arange(S).view(1, -1)
    for b in range(B):
        for h in range(H):
            s = (query[b, h].to(ct) @ key[b, h // grp].to(ct).T) * scale
            if score_mod is not None:
                s = score_mod(s, torch.tensor(b), torch.tensor(h), qi, kj).to(ct)
            if block_mask is not None:
                s = s.masked_fill(~_keep_for_head(block_mask, b, h, L, S), float('-inf'))
            row = torch.logsumexp(s, dim=-1)
            w = torch.exp(s - torch.where(torch.isneginf(row), torch.zeros_like(row), row)[:, None])
            out[b, h] = (w @ value[b, h // grp].to(ct)).to(query.dtype)
            lse[b, h] = row
    if return_lse:
        return out, lse
    return out
