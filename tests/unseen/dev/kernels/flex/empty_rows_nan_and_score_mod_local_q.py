"""Tiled FlexAttention: q tiles of BLOCK_SIZE[0] rows, each tile attends its listed kv blocks in one softmax;
score_mod is evaluated on the tile."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod receives the query index relative to the q tile (0 .. Q_BLOCK-1) instead of the absolute "
        "query index, so position-dependent score_mods are wrong for every q block but the first",
        "a query row that sees no key (every listed key masked by mask_mod, or no block listed) gets NaN output "
        "and NaN lse instead of 0 and -inf",
    ],
    "kind": "two",
}


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[-1]
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    g = H // Hkv if enable_gqa else 1
    QB, KB = block_mask.BLOCK_SIZE if block_mask is not None else (L, S)
    smod = None
    if score_mod is not None:
        smod = torch.vmap(torch.vmap(score_mod, in_dims=(0, None, None, None, 0)), in_dims=(0, None, None, 0, None))
    if block_mask is not None:
        mmod = torch.vmap(torch.vmap(block_mask.mask_mod, in_dims=(None, None, None, 0)),
                          in_dims=(None, None, 0, None))
    out = torch.zeros(B, H, L, Ev, dtype=ct)
    lse = torch.zeros(B, H, L, dtype=ct)
    for b in range(B):
        for h in range(H):
            tb, th = torch.tensor(b), torch.tensor(h)
            for qb in range(-(-L // QB)):
                r0, r1 = qb * QB, min(L, (qb + 1) * QB)
                rows = torch.arange(r0, r1)
                if block_mask is None:
                    cols, masked = torch.arange(S), torch.zeros(S, dtype=torch.bool)
                else:
                    bi = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
                    hi = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
                    parts, flags = [], []
                    n = int(block_mask.kv_num_blocks[bi, hi, qb])
                    for kb in block_mask.kv_indices[bi, hi, qb, :n].tolist():
                        c = torch.arange(kb * KB, min(S, (kb + 1) * KB))
                        parts.append(c)
                        flags.append(torch.ones(c.numel(), dtype=torch.bool))
                    if block_mask.full_kv_num_blocks is not None:
                        n = int(block_mask.full_kv_num_blocks[bi, hi, qb])
                        for kb in block_mask.full_kv_indices[bi, hi, qb, :n].tolist():
                            c = torch.arange(kb * KB, min(S, (kb + 1) * KB))
                            parts.append(c)
                            flags.append(torch.zeros(c.numel(), dtype=torch.bool))
                    cols = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
                    masked = torch.cat(flags) if flags else torch.zeros(0, dtype=torch.bool)
                s = query[b, h, rows].to(ct) @ key[b, h // g, cols].to(ct).T * scale
                if smod is not None:
                    s = smod(s, tb, th, rows - r0, cols).to(ct)
                if block_mask is not None and cols.numel():
                    keep = mmod(tb, th, rows, cols).bool() | ~masked[None, :]
                    s = s.masked_fill(~keep, -math.inf)
                m = s.amax(-1, keepdim=True) if cols.numel() else torch.full((r1 - r0, 1), -math.inf, dtype=ct)
                e = torch.exp(s - m)
                z = e.sum(-1, keepdim=True)
                out[b, h, r0:r1] = (e @ value[b, h // g, cols].to(ct)) / z
                lse[b, h, r0:r1] = (m + torch.log(z)).squeeze(-1)
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
