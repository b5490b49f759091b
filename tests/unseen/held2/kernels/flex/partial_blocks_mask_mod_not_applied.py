"""Dense flex attention: BlockMask flags expanded to an element-level keep matrix, score_mod and mask_mod vmapped
over the (b, h, q, kv) grid, one float32 softmax over the whole row."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "partial blocks (kv_indices) are kept whole without evaluating mask_mod inside them; only full blocks may skip "
        "mask_mod, partial blocks need it to drop their masked elements",
    ],
    "kind": "semantic",
}


def _bhqk_vmap(fn, with_score):
    lead = (0,) if with_score else ()
    for dims in ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)):
        fn = torch.vmap(fn, in_dims=lead + dims)
    return fn


def _block_flags(num, idx, n_kv_blocks):
    slots = torch.arange(idx.shape[-1], device=idx.device)
    valid = (slots < num.unsqueeze(-1)) & (idx < n_kv_blocks)
    target = torch.where(valid, idx.long(), torch.full_like(idx, n_kv_blocks).long())
    flags = torch.zeros(*idx.shape[:-1], n_kv_blocks + 1, dtype=torch.bool, device=idx.device)
    flags.scatter_(-1, target, torch.ones_like(target, dtype=torch.bool))
    return flags[..., :n_kv_blocks]


def _to_elements(flags, q_block, kv_block, L, S):
    return flags.repeat_interleave(q_block, dim=-2)[..., :L, :].repeat_interleave(kv_block, dim=-1)[..., :S]


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    dtype = query.dtype
    wt = torch.float64 if dtype == torch.float64 else torch.float32
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    dev = query.device
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    k = key.to(wt)
    v = value.to(wt)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)

    b_idx = torch.arange(B, device=dev)
    h_idx = torch.arange(H, device=dev)
    q_idx = torch.arange(L, device=dev)
    kv_idx = torch.arange(S, device=dev)

    s = torch.matmul(query.to(wt), k.transpose(-2, -1)) * scale
    if score_mod is not None:
        s = _bhqk_vmap(score_mod, True)(s, b_idx, h_idx, q_idx, kv_idx)

    if block_mask is not None:
        qbs, kbs = block_mask.BLOCK_SIZE
        nkb = (S + kbs - 1) // kbs
        partial = _block_flags(block_mask.kv_num_blocks, block_mask.kv_indices, nkb)
        partial = _to_elements(partial, qbs, kbs, L, S)
        if block_mask.full_kv_num_blocks is not None:
            full = _block_flags(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, nkb)
            full = _to_elements(full, qbs, kbs, L, S)
        else:
            full = torch.zeros_like(partial)
        keep = full | partial
        s = s.masked_fill(~keep, float("-inf"))

    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    live = l > 0
    l1 = torch.where(live, l, torch.ones_like(l))
    out = (torch.matmul(p, v) / l1).to(dtype)
    if return_lse:
        lse = torch.where(live, m + torch.log(l1), torch.full_like(l, float("-inf"))).squeeze(-1)
        return out, lse.detach()
    return out
