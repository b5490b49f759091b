"""Dense FlexAttention in the style of the eager math reference: score grid, score_mod, mask, softmax.

The block mask is expanded once (mask_mod evaluated on the grid inside listed partial blocks, full blocks all-true).
"""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod is applied to the unscaled dot product q.k and the scale is multiplied in after it, so any "
        "score_mod that is not linear-homogeneous (bias terms, ALiBi, soft-cap, relative position) gets the wrong "
        "score: the bias is scaled by `scale` too"
    ],
    "kind": "semantic",
}


def _grid4(fn, n_lead):
    # vmap fn over (b, h, q_idx, kv_idx); the first n_lead args are batched on the (b, h, q, kv) grid
    dims = [(0,) * n_lead + (None, None, None, 0), (0,) * n_lead + (None, None, 0, None),
            (0,) * n_lead + (None, 0, None, None), (0,) * n_lead + (0, None, None, None)]
    for d in dims:
        fn = torch.vmap(fn, in_dims=d)
    return fn


def _visible(block_mask, B, H, L, S, device):
    QB, KB = block_mask.BLOCK_SIZE
    nq = (L + QB - 1) // QB
    nk = (S + KB - 1) // KB
    part = torch.zeros(B, H, nq, nk, dtype=torch.bool, device=device)
    full = torch.zeros(B, H, nq, nk, dtype=torch.bool, device=device)
    for num, idx, dst in ((block_mask.kv_num_blocks, block_mask.kv_indices, part),
                          (block_mask.full_kv_num_blocks, block_mask.full_kv_indices, full)):
        if num is None:
            continue
        for b in range(B):
            for h in range(H):
                bi, hi = min(b, num.shape[0] - 1), min(h, num.shape[1] - 1)
                for qb in range(nq):
                    dst[b, h, qb, idx[bi, hi, qb, :int(num[bi, hi, qb])].long()] = True
    expand = lambda t: t.repeat_interleave(QB, 2)[:, :, :L].repeat_interleave(KB, 3)[:, :, :, :S]  # noqa: E731
    mm = _grid4(block_mask.mask_mod, 0)(torch.arange(B), torch.arange(H), torch.arange(L), torch.arange(S))
    return expand(full) | (expand(part) & mm.to(torch.bool))


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    k, v = key.to(ct), value.to(ct)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, 1)
        v = v.repeat_interleave(H // Hkv, 1)
    scores = torch.matmul(query.to(ct), k.transpose(-2, -1))
    if score_mod is not None:
        scores = _grid4(score_mod, 1)(scores, torch.arange(B), torch.arange(H), torch.arange(L),
                                      torch.arange(S)).to(ct)
    scores = scores * scale
    if block_mask is not None:
        scores = scores.masked_fill(~_visible(block_mask, B, H, L, S, query.device), float("-inf"))
    lse = torch.logsumexp(scores, -1)
    probs = torch.exp(scores - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
    out = torch.matmul(probs, v).to(query.dtype)
    return (out, lse) if return_lse else out
