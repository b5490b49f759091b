"""flex_attention computed one kv-head group at a time (all query heads sharing a kv head in one batched matmul)."""
import math

import torch
from torch.nn.attention.flex_attention import create_mask

TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod and mask_mod receive the kv-head index g = h // (H // Hkv) as their head argument instead of the "
        "query head h; with grouped-query attention every query head of a group gets its group's kv-head-index bias/"
        "mask (right only when Hkv == H)",
    ],
    "kind": "semantic",
}


def _expand_blocks(num, idx, QB, KB, L, S):
    n_kv = (S + KB - 1) // KB
    slot = torch.arange(idx.shape[-1], device=idx.device)
    col = torch.where(slot < num.unsqueeze(-1), idx.long(), torch.full_like(idx.long(), n_kv))
    dense = torch.zeros(*idx.shape[:-1], n_kv + 1, dtype=torch.bool, device=idx.device).scatter_(-1, col, True)
    dense = dense[..., :n_kv]
    return dense.repeat_interleave(QB, -2)[..., :L, :].repeat_interleave(KB, -1)[..., :S]


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    G = H // Hkv
    dt = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    dev = query.device
    b_idx = torch.arange(B, device=dev).view(B, 1, 1, 1)
    q_idx = torch.arange(L, device=dev).view(1, 1, L, 1)
    kv_idx = torch.arange(S, device=dev).view(1, 1, 1, S)

    blk = None
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        blk_partial = _expand_blocks(block_mask.kv_num_blocks, block_mask.kv_indices, QB, KB, L, S)
        blk_full = None
        if block_mask.full_kv_num_blocks is not None:
            blk_full = _expand_blocks(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, QB, KB, L, S)
        blk = (blk_partial, blk_full)

    out = torch.empty(B, H, L, value.shape[-1], dtype=dt, device=dev)
    lse = torch.empty(B, H, L, dtype=dt, device=dev)
    for g in range(Hkv):
        hs = slice(g * G, (g + 1) * G)
        qg = query[:, hs].to(dt)
        kg = key[:, g:g + 1].to(dt)
        vg = value[:, g:g + 1].to(dt)
        s = torch.matmul(qg, kg.transpose(-1, -2)) * scale
        head = torch.full((1, 1, 1, 1), g, dtype=torch.long, device=dev)
        if score_mod is not None:
            s = torch.broadcast_to(score_mod(s, b_idx, head, q_idx, kv_idx), s.shape).to(dt)
        if blk is not None:
            part, full = blk
            hsel = slice(None) if part.shape[1] == 1 else hs
            elem = torch.broadcast_to(block_mask.mask_mod(b_idx, head, q_idx, kv_idx), (B, 1, L, S))
            allowed = part[:, hsel] & elem
            if full is not None:
                allowed = allowed | full[:, hsel]
            s = s.masked_fill(~allowed, float("-inf"))
        l = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(l), torch.zeros_like(l), l).unsqueeze(-1))
        out[:, hs] = torch.matmul(p, vg)
        lse[:, hs] = l
    out = out.to(query.dtype)
    return (out, lse.float()) if return_lse else out
