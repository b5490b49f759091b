"""Dense FlexAttention: expand the BlockMask to a (B, H, L, S) boolean grid, then one masked float32 softmax.

The block lists decide visibility block by block; score_mod is vmapped over the whole score grid.
"""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "partial blocks (kv_indices) are marked visible as a whole just like full blocks, mask_mod is never called, "
        "so inside every partial block the keys that mask_mod hides (e.g. above the causal diagonal) are attended"
    ],
    "kind": "semantic",
}


def _block_grid(block_mask, B, H, L, S, device):
    QB, KB = block_mask.BLOCK_SIZE
    vis = torch.zeros(B, H, L, S, dtype=torch.bool, device=device)
    lists = [(block_mask.kv_num_blocks, block_mask.kv_indices)]
    if block_mask.full_kv_num_blocks is not None:
        lists.append((block_mask.full_kv_num_blocks, block_mask.full_kv_indices))
    for num, idx in lists:
        nb, nh = num.shape[:2]
        for b in range(B):
            for h in range(H):
                bi, hi = (b if nb > 1 else 0), (h if nh > 1 else 0)
                for qb in range(num.shape[2]):
                    for kb in idx[bi, hi, qb, :int(num[bi, hi, qb])].tolist():
                        vis[b, h, qb * QB:(qb + 1) * QB, kb * KB:(kb + 1) * KB] = True
    return vis


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    k, v = key.to(ct), value.to(ct)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    s = query.to(ct) @ k.transpose(-1, -2) * scale
    if score_mod is not None:
        fn = score_mod
        for dims in [(0, None, None, None, 0), (0, None, None, 0, None), (0, None, 0, None, None),
                     (0, 0, None, None, None)]:
            fn = torch.vmap(fn, in_dims=dims)
        s = fn(s, torch.arange(B), torch.arange(H), torch.arange(L), torch.arange(S)).to(ct)
    if block_mask is not None:
        s = s.masked_fill(~_block_grid(block_mask, B, H, L, S, query.device), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.masked_fill(torch.isinf(lse), 0.0)[..., None])
    out = (p @ v).to(query.dtype)
    return (out, lse) if return_lse else out
