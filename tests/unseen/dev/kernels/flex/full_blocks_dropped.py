"""FlexAttention in eager PyTorch: expand the BlockMask's kv_num_blocks / kv_indices into a dense key mask,
refine it with mask_mod, then one masked softmax per (batch, head)."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "only the partial blocks (kv_num_blocks / kv_indices) are turned into visible keys; the full blocks "
        "listed in full_kv_num_blocks / full_kv_indices are never added, so keys in full blocks are masked out"
    ],
    "kind": "semantic",
}


def _dense_mask(block_mask, B, H, L, S, device):
    q_bs, kv_bs = block_mask.BLOCK_SIZE
    mB, mH, nQ = block_mask.kv_num_blocks.shape
    allowed = torch.zeros(mB, mH, L, S, dtype=torch.bool, device=device)
    for b in range(mB):
        for h in range(mH):
            for qb in range(nQ):
                n = int(block_mask.kv_num_blocks[b, h, qb])
                for kb in block_mask.kv_indices[b, h, qb, :n].tolist():
                    allowed[b, h, qb * q_bs:(qb + 1) * q_bs, kb * kv_bs:(kb + 1) * kv_bs] = True
    f = torch.vmap(block_mask.mask_mod, in_dims=(None, None, None, 0))
    f = torch.vmap(f, in_dims=(None, None, 0, None))
    f = torch.vmap(f, in_dims=(None, 0, None, None))
    f = torch.vmap(f, in_dims=(0, None, None, None))
    mm = f(torch.arange(B, device=device), torch.arange(H, device=device), torch.arange(L, device=device),
           torch.arange(S, device=device)).to(torch.bool)
    return allowed.expand(B, H, L, S) & mm


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    k, v = key.to(acc), value.to(acc)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, 1)
        v = v.repeat_interleave(H // Hkv, 1)
    s = query.to(acc) @ k.transpose(-1, -2) * scale
    if score_mod is not None:
        f = torch.vmap(score_mod, in_dims=(0, None, None, None, 0))
        f = torch.vmap(f, in_dims=(0, None, None, 0, None))
        f = torch.vmap(f, in_dims=(0, None, 0, None, None))
        f = torch.vmap(f, in_dims=(0, 0, None, None, None))
        s = f(s, torch.arange(B), torch.arange(H), torch.arange(L), torch.arange(S)).to(acc)
    if block_mask is not None:
        s = s.masked_fill(~_dense_mask(block_mask, B, H, L, S, query.device), -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    out = (p @ v).to(query.dtype)
    return (out, lse) if return_lse else out
