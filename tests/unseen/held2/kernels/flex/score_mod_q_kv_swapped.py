"""Flex attention tiled over query blocks: index grids from meshgrid, score_mod / mask_mod applied through a
four-level torch.vmap, BlockMask consulted block by block, float32 softmax per query block."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod is called as score_mod(score, b, h, kv_idx, q_idx), with the query and key indices swapped; "
        "the signature is score_mod(score, b, h, q_idx, kv_idx) (differs for any position-asymmetric score_mod)"
    ],
    "kind": "semantic",
}

Q_TILE = 128


def _grid_vmap(fn):
    for _ in range(4):
        fn = torch.vmap(fn)
    return fn


def _block_keep(block_mask, B, H, i0, i1, S, dev):
    qbs, kbs = block_mask.BLOCK_SIZE
    rows = torch.arange(i0, i1, device=dev)
    cols = torch.arange(S, device=dev)
    qblk = (rows // qbs).long()
    kblk = (cols // kbs).long()

    def flags(num, idx):
        Bm, Hm, _, slots = idx.shape
        num = num[:, :, qblk]
        idx = idx[:, :, qblk].long()
        valid = torch.arange(slots, device=dev).view(1, 1, 1, -1) < num.unsqueeze(-1)
        hit = (idx.unsqueeze(-1) == kblk.view(1, 1, 1, 1, -1)) & valid.unsqueeze(-1)
        return hit.any(dim=-2).expand(B, H, i1 - i0, S)

    partial = flags(block_mask.kv_num_blocks, block_mask.kv_indices)
    if block_mask.full_kv_num_blocks is None:
        full = torch.zeros_like(partial)
    else:
        full = flags(block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
    return partial, full


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    in_dtype = query.dtype
    f = torch.float64 if in_dtype == torch.float64 else torch.float32
    dev = query.device
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    kk, vv = key.to(f), value.to(f)
    if enable_gqa and Hkv != H:
        sel = torch.arange(H, device=dev) // (H // Hkv)
        kk, vv = kk[:, sel], vv[:, sel]
    sm = _grid_vmap(score_mod) if score_mod is not None else None
    mm = _grid_vmap(block_mask.mask_mod) if block_mask is not None else None

    outs, lses = [], []
    for i0 in range(0, L, Q_TILE):
        i1 = min(i0 + Q_TILE, L)
        bg, hg, qg, kg = torch.meshgrid(
            torch.arange(B, device=dev), torch.arange(H, device=dev),
            torch.arange(i0, i1, device=dev), torch.arange(S, device=dev), indexing="ij")
        s = torch.matmul(query[:, :, i0:i1].to(f), kk.transpose(-1, -2)) * scale
        if sm is not None:
            s = sm(s, bg, hg, kg, qg)
        if block_mask is not None:
            partial, full = _block_keep(block_mask, B, H, i0, i1, S, dev)
            keep = full | (partial & mm(bg, hg, qg, kg))
            s = s.masked_fill(~keep, float("-inf"))
        mx = s.amax(-1, keepdim=True).detach()
        mx = torch.where(mx == float("-inf"), torch.zeros_like(mx), mx)
        p = torch.exp(s - mx)
        den = p.sum(-1, keepdim=True)
        pos = den > 0
        den1 = torch.where(pos, den, torch.ones_like(den))
        outs.append(torch.matmul(p, vv) / den1)
        lses.append(torch.where(pos, mx + torch.log(den1), torch.full_like(den, float("-inf"))).squeeze(-1))
    out = torch.cat(outs, dim=2).to(in_dtype)
    if return_lse:
        return out, torch.cat(lses, dim=2).detach()
    return out
