TRUTH = {'api': 'flex', 'bugs': ['under enable_gqa the head index handed to score_mod and mask_mod is the kv head (h // (H // Hkv)) that was used to gather key/value, instead of the query head h; head-dependent mods are evaluated for the wrong head (gqa_headmask, batch_scoremod_gqa); without GQA it is right'], 'kind': 'semantic'}
import math

import torch


def _vmapped(fn, n_lead):
    # fn(x, b, h, q, k) over a (B, H, L, S) grid; n_lead = number of leading tensor args that carry the grid
    dims_k = (0,) * n_lead + (None, None, None, 0)
    dims_q = (0,) * n_lead + (None, None, 0, None)
    dims_h = (0,) * n_lead + (None, 0, None, None)
    dims_b = (0,) * n_lead + (0, None, None, None)
    for dims in (dims_k, dims_q, dims_h, dims_b):
        fn = torch.vmap(fn, in_dims=dims)
    return fn


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    n_rep = H // Hkv if enable_gqa else 1
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    dtype = torch.float64 if query.dtype == torch.float64 else torch.float32

    head_idx = torch.arange(H) // n_rep
    k = key.to(dtype)[:, head_idx]
    v = value.to(dtype)[:, head_idx]
    b_idx = torch.arange(B)
    q_idx = torch.arange(L)
    kv_idx = torch.arange(S)

    scores = torch.einsum('bhld,bhsd->bhls', query.to(dtype), k) * scale
    if score_mod is not None:
        scores = _vmapped(score_mod, 1)(scores, b_idx, head_idx, q_idx, kv_idx).to(dtype)

    if block_mask is not None:
        qbs, kbs = block_mask.BLOCK_SIZE
        nb, nh, nqb = block_mask.kv_num_blocks.shape
        nkb = block_mask.kv_indices.shape[-1]
        col = torch.arange(nkb)
        part = torch.zeros(nb, nh, nqb, nkb, dtype=torch.bool).scatter_(
            -1, block_mask.kv_indices.long(), col < block_mask.kv_num_blocks.long().unsqueeze(-1))
        full = torch.zeros_like(part)
        if block_mask.full_kv_num_blocks is not None:
            full.scatter_(-1, block_mask.full_kv_indices.long(),
                          col < block_mask.full_kv_num_blocks.long().unsqueeze(-1))
        rq, rk = torch.arange(L) // qbs, torch.arange(S) // kbs
        part = part[:, :, rq][..., rk].expand(B, H, L, S)
        full = full[:, :, rq][..., rk].expand(B, H, L, S)
        inside = _vmapped(block_mask.mask_mod, 0)(b_idx, head_idx, q_idx, kv_idx)
        scores = scores.masked_fill(~(full | (part & inside)), float('-inf'))

    lse = torch.logsumexp(scores, dim=-1)
    p = torch.exp(scores - lse.nan_to_num(neginf=0.0).unsqueeze(-1))
    out = torch.matmul(p, v).to(query.dtype)
    if return_lse:
        return out, lse
    return out
