"""Block-sparse FlexAttention forward in eager PyTorch: walk the BlockMask's kv block lists for each q block.

Partial blocks call mask_mod (vmapped over the tile), full blocks are taken whole; score_mod is vmapped over each tile.
Softmax is dense over the gathered keys of the q block, in float32 (float64 for float64 inputs).
"""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [],
    "kind": "correct",
}


def _tile_fn(fn):
    # fn(x, b, h, q_idx, kv_idx) over a (rows, cols) tile: inner vmap over kv, outer over q
    inner = torch.vmap(fn, in_dims=(0, None, None, None, 0))
    return torch.vmap(inner, in_dims=(0, None, None, 0, None))


def _tile_mask(mask_mod):
    inner = torch.vmap(mask_mod, in_dims=(None, None, None, 0))
    return torch.vmap(inner, in_dims=(None, None, 0, None))


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    dev = query.device
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(E)
    group = H // Hkv if enable_gqa else 1
    out = torch.zeros(B, H, L, value.shape[-1], dtype=ct, device=dev)
    lse = torch.full((B, H, L), -math.inf, dtype=ct, device=dev)
    score_tile = _tile_fn(score_mod) if score_mod is not None else None

    if block_mask is None:
        q_block, kv_block = L, S
    else:
        q_block, kv_block = block_mask.BLOCK_SIZE
        mask_tile = _tile_mask(block_mask.mask_mod)

    for b in range(B):
        for h in range(H):
            hk = h // group
            bt, ht = torch.tensor(b, device=dev), torch.tensor(h, device=dev)
            for qb in range((L + q_block - 1) // q_block):
                rows = torch.arange(qb * q_block, min(L, (qb + 1) * q_block), device=dev)
                cols, keep = [], []
                if block_mask is None:
                    cols.append(torch.arange(S, device=dev))
                    keep.append(torch.ones(rows.numel(), S, dtype=torch.bool, device=dev))
                else:
                    bi = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
                    hi = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
                    n = int(block_mask.kv_num_blocks[bi, hi, qb])
                    for kb in block_mask.kv_indices[bi, hi, qb, :n].tolist():
                        c = torch.arange(kb * kv_block, min(S, (kb + 1) * kv_block), device=dev)
                        cols.append(c)
                        keep.append(mask_tile(bt, ht, rows, c).to(torch.bool))
                    if block_mask.full_kv_num_blocks is not None:
                        n = int(block_mask.full_kv_num_blocks[bi, hi, qb])
                        for kb in block_mask.full_kv_indices[bi, hi, qb, :n].tolist():
                            c = torch.arange(kb * kv_block, min(S, (kb + 1) * kv_block), device=dev)
                            cols.append(c)
                            keep.append(torch.ones(rows.numel(), c.numel(), dtype=torch.bool, device=dev))
                if not cols:
                    continue
                c = torch.cat(cols)
                if c.numel() == 0:
                    continue
                kmask = torch.cat(keep, dim=1)
                s = query[b, h, rows].to(ct) @ key[b, hk, c].to(ct).transpose(0, 1) * sm_scale
                if score_tile is not None:
                    s = score_tile(s, bt, ht, rows, c).to(ct)
                s = s.masked_fill(~kmask, -math.inf)
                row_lse = torch.logsumexp(s, dim=-1)
                p = torch.exp(s - torch.where(torch.isinf(row_lse), torch.zeros_like(row_lse), row_lse)[:, None])
                out[b, h, rows] = p @ value[b, hk, c].to(ct)
                lse[b, h, rows] = row_lse
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
