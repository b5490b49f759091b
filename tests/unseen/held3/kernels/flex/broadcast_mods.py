"""Dense flex_attention that evaluates score_mod and mask_mod on broadcast (b, h, q, kv) index grids."""
import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod is applied to the raw q.k dot product and the softmax scale is multiplied in afterwards "
        "(scale * score_mod(q.k)); flex_attention passes the already-scaled score to score_mod, so additive biases, "
        "caps etc. end up multiplied by scale",
    ],
    "kind": "semantic",
}


def _grids(B, H, L, S, device):
    return (torch.arange(B, device=device).view(B, 1, 1, 1), torch.arange(H, device=device).view(1, H, 1, 1),
            torch.arange(L, device=device).view(1, 1, L, 1), torch.arange(S, device=device).view(1, 1, 1, S))


def _mask_from_block_mask(bm, B, H, L, S, device):
    b, h, qi, ki = _grids(B, H, L, S, device)
    qb, kb = bm.BLOCK_SIZE
    n_kv = (S + kb - 1) // kb
    slots = torch.arange(bm.kv_indices.shape[-1], device=device)

    def to_dense(num, idx):
        d = torch.zeros(*idx.shape[:-1], n_kv + 1, dtype=torch.bool, device=device)
        tgt = torch.where(slots < num[..., None], idx.long(), n_kv)
        return d.scatter_(-1, tgt, True)[..., :n_kv]

    def blocks_to_elems(d):
        rows = (qi // qb).clamp(max=d.shape[-2] - 1)
        cols = (ki // kb).clamp(max=d.shape[-1] - 1)
        d = d.expand(B, H, *d.shape[-2:])
        return d[b, h, rows, cols]

    partial = blocks_to_elems(to_dense(bm.kv_num_blocks, bm.kv_indices))
    elem = torch.broadcast_to(bm.mask_mod(b, h, qi, ki), (B, H, L, S))
    allowed = partial & elem
    if bm.full_kv_num_blocks is not None:
        allowed = allowed | blocks_to_elems(to_dense(bm.full_kv_num_blocks, bm.full_kv_indices))
    return allowed


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    f = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else D ** -0.5
    kk = key.to(f)
    vv = value.to(f)
    if H != Hkv:
        kk = kk.repeat_interleave(H // Hkv, 1)
        vv = vv.repeat_interleave(H // Hkv, 1)
    s = query.to(f) @ kk.transpose(-2, -1)
    if score_mod is not None:
        b, h, qi, ki = _grids(B, H, L, S, query.device)
        s = torch.broadcast_to(score_mod(s, b, h, qi, ki), s.shape).to(f)
    s = s * scale
    if block_mask is not None:
        s = s.masked_fill(~_mask_from_block_mask(block_mask, B, H, L, S, query.device), float("-inf"))
    lse = s.logsumexp(-1)
    w = (s - lse.nan_to_num(neginf=0.0)[..., None]).exp()
    out = (w @ vv).to(query.dtype)
    return (out, lse.float()) if return_lse else out
