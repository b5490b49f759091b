"""FlexAttention forward for square-block masks: per q block, concatenate the listed kv blocks' keys and attend.

Masked entries are set to -inf first and score_mod is applied to the masked score tile.
"""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "the key range of kv block kb is computed with the q block size (kb * BLOCK_SIZE[0] .. + BLOCK_SIZE[0]) "
        "instead of the kv block size BLOCK_SIZE[1], so with BLOCK_SIZE=(q, kv) and q != kv the wrong keys are "
        "visited",
        "score_mod is applied after the mask has written -inf, so score_mods that map -inf to a finite value "
        "(e.g. soft-cap c * tanh(s / c) gives -c) make masked keys visible again",
    ],
    "kind": "two",
}


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    ft = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    n_rep = H // Hkv if enable_gqa else 1
    blk = block_mask.BLOCK_SIZE[0] if block_mask is not None else max(L, S)
    smod = None
    if score_mod is not None:
        smod = torch.vmap(torch.vmap(score_mod, in_dims=(0, None, None, None, 0)), in_dims=(0, None, None, 0, None))
    mmod = None
    if block_mask is not None:
        mmod = torch.vmap(torch.vmap(block_mask.mask_mod, in_dims=(None, None, None, 0)),
                          in_dims=(None, None, 0, None))
    out = torch.zeros(B, H, L, value.shape[-1], dtype=ft)
    lse = torch.full((B, H, L), -math.inf, dtype=ft)
    for b in range(B):
        for h in range(H):
            tb, th = torch.tensor(b), torch.tensor(h)
            for qb in range((L + blk - 1) // blk):
                rows = torch.arange(qb * blk, min(L, qb * blk + blk))
                chunks = []
                if block_mask is None:
                    chunks.append((torch.arange(S), False))
                else:
                    bi = min(b, block_mask.kv_num_blocks.shape[0] - 1)
                    hi = min(h, block_mask.kv_num_blocks.shape[1] - 1)
                    for num, idx, part in ((block_mask.kv_num_blocks, block_mask.kv_indices, True),
                                           (block_mask.full_kv_num_blocks, block_mask.full_kv_indices, False)):
                        if num is None:
                            continue
                        for kb in idx[bi, hi, qb, :int(num[bi, hi, qb])].tolist():
                            c = torch.arange(kb * blk, kb * blk + blk)
                            chunks.append((c[c < S], part))
                chunks = [(c, p) for c, p in chunks if c.numel()]
                if not chunks:
                    continue
                cols = torch.cat([c for c, _ in chunks])
                s = query[b, h, rows].to(ft) @ key[b, h // n_rep, cols].to(ft).t() * scale
                if block_mask is not None:
                    keep = torch.cat([mmod(tb, th, rows, c).to(torch.bool) if p
                                      else torch.ones(rows.numel(), c.numel(), dtype=torch.bool) for c, p in chunks], 1)
                    s = s.masked_fill(~keep, -math.inf)
                if smod is not None:
                    s = smod(s, tb, th, rows, cols).to(ft)
                r_lse = torch.logsumexp(s, dim=-1)
                p = torch.exp(s - torch.where(torch.isinf(r_lse), torch.zeros_like(r_lse), r_lse)[:, None])
                out[b, h, rows] = p @ value[b, h // n_rep, cols].to(ft)
                lse[b, h, rows] = r_lse
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
