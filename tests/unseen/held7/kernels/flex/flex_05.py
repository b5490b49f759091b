import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod and mask_mod receive the kv head index (h // (H // Hkv)) as their head argument instead of the query head h. Wrong with enable_gqa and a head-dependent score_mod or mask_mod.",
        "The lse buffer is allocated in the input dtype (dtype=query.dtype) instead of float32, so for bfloat16 inputs the returned lse is rounded to bfloat16 (abs error up to ~1.6e-2). out is unaffected."
    ],
    "kind": "two"
}


LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _visible(block_mask, b, h, L, S):
    """(L, S) bool: keys a query of (b, h) may see, from the BlockMask's block lists and its mask_mod."""
    QB, KB = block_mask.BLOCK_SIZE
    bb = min(b, block_mask.kv_num_blocks.shape[0] - 1)
    hh = min(h, block_mask.kv_num_blocks.shape[1] - 1)
    part = torch.zeros(L, S, dtype=torch.bool)
    full = torch.zeros(L, S, dtype=torch.bool)
    nq = block_mask.kv_num_blocks.shape[-1]
    for qb in range(nq):
        rows = slice(qb * QB, (qb + 1) * QB)
        for j in block_mask.kv_indices[bb, hh, qb, :int(block_mask.kv_num_blocks[bb, hh, qb])].tolist():
            part[rows, j * KB:(j + 1) * KB] = True
        if block_mask.full_kv_num_blocks is not None:
            for j in block_mask.full_kv_indices[bb, hh, qb, :int(block_mask.full_kv_num_blocks[bb, hh, qb])].tolist():
                full[rows, j * KB:(j + 1) * KB] = True
    qi = torch.arange(L)[:, None]
    ki = torch.arange(S)[None, :]
    mm = block_mask.mask_mod(torch.tensor(b), torch.tensor(h), qi, ki)
    return full | (part & mm)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    g = H // Hkv if enable_gqa else 1
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    dt = torch.float64 if query.dtype == torch.float64 else torch.float32
    qi = torch.arange(L)[:, None]
    ki = torch.arange(S)[None, :]
    out = torch.empty(B, H, L, value.shape[-1], dtype=query.dtype)
    lse = torch.empty(B, H, L, dtype=query.dtype)
    for b in range(B):
        for h in range(H):
            kvh = h // g
            s = torch.matmul(query[b, h].to(dt), key[b, kvh].to(dt).t()) * sc
            if score_mod is not None:
                s = score_mod(s, torch.tensor(b), torch.tensor(kvh), qi, ki).to(dt)
            z = s * LOG2E
            if block_mask is not None:
                z = z.masked_fill(~_visible(block_mask, b, kvh, L, S), float('-inf'))
            zmax = z.amax(-1, keepdim=True)
            zmax = torch.where(torch.isinf(zmax), torch.zeros_like(zmax), zmax)
            w = torch.exp2(z - zmax)
            tot = w.sum(-1, keepdim=True)
            some = tot > 0
            tot1 = torch.where(some, tot, torch.ones_like(tot))
            out[b, h] = torch.matmul(w / tot1, value[b, kvh].to(dt)).to(query.dtype)
            lse[b, h] = torch.where(some, (zmax + torch.log2(tot1)) * LN2, torch.full_like(tot, float('-inf')))[:, 0]
    if return_lse:
        return out, lse
    return out
