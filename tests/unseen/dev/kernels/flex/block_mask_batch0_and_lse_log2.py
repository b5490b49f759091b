"""exp2-based FlexAttention forward (Triton-kernel port): log2(e) folded into the scores, block lists read from the
BlockMask, running max/sum in float32."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "the block lists are always read from batch 0 of the BlockMask (kv_num_blocks[0], kv_indices[0], ...) and "
        "mask_mod is called with b = 0, so a BlockMask built per batch (B > 1) applies batch 0's mask to every "
        "batch",
        "the returned lse is in base 2 (m2 + log2(l)) instead of the natural log",
    ],
    "kind": "two",
}

LOG2E = 1.4426950408889634


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[-1]
    f = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    g = H // Hkv if enable_gqa else 1
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        mm = torch.vmap(torch.vmap(block_mask.mask_mod, in_dims=(None, None, None, 0)), in_dims=(None, None, 0, None))
    else:
        QB, KB = L, S
    sm = None
    if score_mod is not None:
        sm = torch.vmap(torch.vmap(score_mod, in_dims=(0, None, None, None, 0)), in_dims=(0, None, None, 0, None))
    out = torch.zeros(B, H, L, Ev, dtype=f)
    lse2 = torch.full((B, H, L), -math.inf, dtype=f)
    zero = torch.tensor(0)
    for b in range(B):
        for h in range(H):
            th = torch.tensor(h)
            for qb in range(-(-L // QB)):
                rows = torch.arange(qb * QB, min(L, (qb + 1) * QB))
                if block_mask is None:
                    blocks = [(0, True)]
                else:
                    hh = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
                    n = int(block_mask.kv_num_blocks[0, hh, qb])
                    blocks = [(j, False) for j in block_mask.kv_indices[0, hh, qb, :n].tolist()]
                    if block_mask.full_kv_num_blocks is not None:
                        n = int(block_mask.full_kv_num_blocks[0, hh, qb])
                        blocks += [(j, True) for j in block_mask.full_kv_indices[0, hh, qb, :n].tolist()]
                qt = query[b, h, rows].to(f)
                m2 = torch.full((rows.numel(), 1), -math.inf, dtype=f)
                l2 = torch.zeros((rows.numel(), 1), dtype=f)
                acc = torch.zeros((rows.numel(), Ev), dtype=f)
                for kb, full in blocks:
                    cols = torch.arange(kb * KB, min(S, (kb + 1) * KB))
                    if cols.numel() == 0:
                        continue
                    s = qt @ key[b, h // g, cols].to(f).T * scale
                    if sm is not None:
                        s = sm(s, torch.tensor(b), th, rows, cols).to(f)
                    s = s * LOG2E
                    if not full:
                        s = s.masked_fill(~mm(zero, th, rows, cols).bool(), -math.inf)
                    m_new = torch.maximum(m2, s.amax(-1, keepdim=True))
                    mu = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                    alpha = torch.exp2(m2 - mu)
                    p = torch.exp2(s - mu)
                    l2 = l2 * alpha + p.sum(-1, keepdim=True)
                    acc = acc * alpha + p @ value[b, h // g, cols].to(f)
                    m2 = m_new
                has = l2 > 0
                out[b, h, rows] = acc / torch.where(has, l2, torch.ones_like(l2))
                lse2[b, h, rows] = torch.where(has, m2 + torch.log2(torch.where(has, l2, torch.ones_like(l2))),
                                               torch.full_like(m2, -math.inf)).squeeze(-1)
    out = out.to(query.dtype)
    return (out, lse2) if return_lse else out
