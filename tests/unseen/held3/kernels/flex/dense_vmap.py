"""flex_attention re-implemented densely: vmapped score_mod/mask_mod over (b, h, q, kv) plus BlockMask block lists."""
import math

import torch
from torch.nn.attention.flex_attention import create_mask

TRUTH = {"api": "flex", "bugs": [], "kind": "correct"}


def _apply_score_mod(score_mod, s):
    B, H, L, S = s.shape
    dev = s.device
    b, h = torch.arange(B, device=dev), torch.arange(H, device=dev)
    m, n = torch.arange(L, device=dev), torch.arange(S, device=dev)
    try:
        from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
        from torch.nn.attention.flex_attention import _vmap_for_bhqkv
    except ImportError:  # pragma: no cover - fall back to broadcasting
        out = score_mod(s, b.view(B, 1, 1, 1), h.view(1, H, 1, 1), m.view(1, 1, L, 1), n.view(1, 1, 1, S))
        return torch.broadcast_to(out, s.shape).to(s.dtype)
    with TransformGetItemToIndex():
        fn = _vmap_for_bhqkv(score_mod, prefix=(0,))
        return fn(s, b, h, m, n).to(s.dtype)


def _blocks_to_dense(num, idx, n_cols):
    """(..., R) counts + (..., R, C) column lists -> (..., R, n_cols) bool."""
    cols = torch.arange(idx.shape[-1], device=idx.device)
    valid = cols < num.unsqueeze(-1)
    tgt = torch.where(valid, idx.long(), torch.full_like(idx.long(), n_cols))
    dense = torch.zeros(*idx.shape[:-1], n_cols + 1, dtype=torch.bool, device=idx.device)
    dense.scatter_(-1, tgt, True)
    return dense[..., :n_cols]


def _block_mask_dense(block_mask, B, H, L, S, device):
    qb, kb = block_mask.BLOCK_SIZE if isinstance(block_mask.BLOCK_SIZE, tuple) else (block_mask.BLOCK_SIZE,) * 2
    n_kv_blocks = (S + kb - 1) // kb
    partial = _blocks_to_dense(block_mask.kv_num_blocks, block_mask.kv_indices, n_kv_blocks)
    full = None
    if block_mask.full_kv_num_blocks is not None:
        full = _blocks_to_dense(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, n_kv_blocks)

    def expand(blk):
        e = blk.repeat_interleave(qb, dim=-2)[..., :L, :].repeat_interleave(kb, dim=-1)[..., :S]
        return e.expand(B, H, L, S)

    inner = create_mask(block_mask.mask_mod, B, H, L, S, device=device).expand(B, H, L, S)
    allowed = expand(partial) & inner
    if full is not None:
        allowed = allowed | expand(full)
    return allowed


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    wd = torch.float64 if query.dtype == torch.float64 else torch.float32
    sm_scale = 1.0 / math.sqrt(D) if scale is None else scale
    k, v = key.to(wd), value.to(wd)
    if Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    s = torch.matmul(query.to(wd), k.transpose(-1, -2)) * sm_scale
    if score_mod is not None:
        s = _apply_score_mod(score_mod, s)
    if block_mask is not None:
        s = s.masked_fill(~_block_mask_dense(block_mask, B, H, L, S, query.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).unsqueeze(-1))
    out = torch.matmul(p, v).to(query.dtype)
    if return_lse:
        return out, lse.float()
    return out
