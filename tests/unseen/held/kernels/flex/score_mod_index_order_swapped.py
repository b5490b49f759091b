"""FlexAttention forward looping over q rows; score_mod and mask_mod are vmapped over the row's candidate keys.

Straightforward reference kernel: gather the row's keys from the block lists, modify, mask, softmax in float32.
"""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod is called as score_mod(score, b, h, kv_idx, q_idx) — the query and key indices swapped — so every "
        "position-dependent score_mod that is not symmetric in (q_idx, kv_idx) (relative-position bias, bias tables "
        "indexed [q_idx, kv_idx]) is evaluated at the transposed position"
    ],
    "kind": "semantic",
}


def _row_keys(block_mask, b, h, row, S):
    """(key indices, needs-mask flags) for one query row, from the block lists."""
    QB, KB = block_mask.BLOCK_SIZE
    qb = row // QB
    num = block_mask.kv_num_blocks
    bi, hi = (b if num.shape[0] > 1 else 0), (h if num.shape[1] > 1 else 0)
    keys, flags = [], []
    for kb in block_mask.kv_indices[bi, hi, qb, :int(num[bi, hi, qb])].tolist():
        r = list(range(kb * KB, min(S, kb * KB + KB)))
        keys += r
        flags += [True] * len(r)
    if block_mask.full_kv_num_blocks is not None:
        fnum = block_mask.full_kv_num_blocks
        for kb in block_mask.full_kv_indices[bi, hi, qb, :int(fnum[bi, hi, qb])].tolist():
            r = list(range(kb * KB, min(S, kb * KB + KB)))
            keys += r
            flags += [False] * len(r)
    return keys, flags


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    g = H // Hkv if enable_gqa else 1
    out = torch.zeros(B, H, L, value.shape[-1], dtype=ct)
    lse = torch.full((B, H, L), -math.inf, dtype=ct)
    smod = torch.vmap(score_mod, in_dims=(0, None, None, 0, None)) if score_mod is not None else None
    mmod = torch.vmap(block_mask.mask_mod, in_dims=(None, None, None, 0)) if block_mask is not None else None
    for b in range(B):
        for h in range(H):
            kh = key[b, h // g].to(ct)
            vh = value[b, h // g].to(ct)
            tb, th = torch.tensor(b), torch.tensor(h)
            for i in range(L):
                if block_mask is None:
                    keys, flags = list(range(S)), [False] * S
                else:
                    keys, flags = _row_keys(block_mask, b, h, i, S)
                if not keys:
                    continue
                ti = torch.tensor(i)
                kidx = torch.tensor(keys)
                srow = (kh[kidx] @ query[b, h, i].to(ct)) * scale
                if smod is not None:
                    srow = smod(srow, tb, th, kidx, ti).to(ct)
                need = torch.tensor(flags)
                if need.any():
                    ok = mmod(tb, th, ti, kidx).to(torch.bool) | ~need
                    srow = srow.masked_fill(~ok, -math.inf)
                row_lse = torch.logsumexp(srow, 0)
                if torch.isinf(row_lse):
                    continue
                out[b, h, i] = torch.exp(srow - row_lse) @ vh[kidx]
                lse[b, h, i] = row_lse
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
