"""Tile-by-tile FlexAttention: per (batch, head, q block), concatenate the listed kv tiles, evaluate mask_mod on
partial tiles, single softmax over the gathered keys."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "inside partial blocks mask_mod is called with the key index relative to the block start (0 .. "
        "KV_BLOCK-1) instead of the absolute key index, so partial blocks other than block 0 are masked wrongly"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[-1]
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    grp = H // Hkv if enable_gqa else 1
    vm_s = None
    if score_mod is not None:
        vm_s = torch.vmap(torch.vmap(score_mod, in_dims=(0, None, None, None, 0)), in_dims=(0, None, None, 0, None))
    out = torch.zeros(B, H, L, Ev, dtype=acc)
    lse = torch.full((B, H, L), -math.inf, dtype=acc)
    if block_mask is None:
        QB, KB = L, S
    else:
        QB, KB = block_mask.BLOCK_SIZE
        vm_m = torch.vmap(torch.vmap(block_mask.mask_mod, in_dims=(None, None, None, 0)),
                          in_dims=(None, None, 0, None))
    for b in range(B):
        for h in range(H):
            tb, th = torch.tensor(b), torch.tensor(h)
            for qb in range(-(-L // QB)):
                r = torch.arange(qb * QB, min(L, qb * QB + QB))
                tiles = []
                if block_mask is None:
                    tiles.append((torch.arange(S), None))
                else:
                    bi = min(b, block_mask.kv_num_blocks.shape[0] - 1)
                    hi = min(h, block_mask.kv_num_blocks.shape[1] - 1)
                    n = int(block_mask.kv_num_blocks[bi, hi, qb])
                    for kb in block_mask.kv_indices[bi, hi, qb, :n].tolist():
                        c = torch.arange(kb * KB, min(S, kb * KB + KB))
                        local = torch.arange(c.numel())
                        tiles.append((c, vm_m(tb, th, r, local).bool()))
                    if block_mask.full_kv_num_blocks is not None:
                        n = int(block_mask.full_kv_num_blocks[bi, hi, qb])
                        for kb in block_mask.full_kv_indices[bi, hi, qb, :n].tolist():
                            tiles.append((torch.arange(kb * KB, min(S, kb * KB + KB)), None))
                tiles = [t for t in tiles if t[0].numel() > 0]
                if not tiles:
                    continue
                cols = torch.cat([c for c, _ in tiles])
                keep = torch.cat([torch.ones(r.numel(), c.numel(), dtype=torch.bool) if mk is None else mk
                                  for c, mk in tiles], dim=1)
                s = query[b, h, r].to(acc) @ key[b, h // grp, cols].to(acc).T * scale
                if vm_s is not None:
                    s = vm_s(s, tb, th, r, cols).to(acc)
                s = s.masked_fill(~keep, -math.inf)
                l_r = torch.logsumexp(s, -1)
                p = torch.exp(s - torch.where(torch.isinf(l_r), torch.zeros_like(l_r), l_r)[:, None])
                out[b, h, r] = p @ value[b, h // grp, cols].to(acc)
                lse[b, h, r] = l_r
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
