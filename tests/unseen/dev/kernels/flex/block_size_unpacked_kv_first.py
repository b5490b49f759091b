"""Block-sparse FlexAttention forward (online softmax over the BlockMask's kv lists), float32 accumulators."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "BLOCK_SIZE is unpacked as (kv block, q block) instead of (q block, kv block), so whenever the two "
        "differ the query rows and key columns of every listed block are wrong"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[-1]
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    rep = H // Hkv if enable_gqa else 1
    if block_mask is not None:
        KV_BLOCK, Q_BLOCK = block_mask.BLOCK_SIZE
        mask_fn = torch.vmap(torch.vmap(block_mask.mask_mod, in_dims=(None, None, None, 0)),
                             in_dims=(None, None, 0, None))
    else:
        KV_BLOCK, Q_BLOCK = S, L
    score_fn = None
    if score_mod is not None:
        score_fn = torch.vmap(torch.vmap(score_mod, in_dims=(0, None, None, None, 0)),
                              in_dims=(0, None, None, 0, None))
    out = torch.zeros(B, H, L, Ev, dtype=acc)
    lse = torch.full((B, H, L), -math.inf, dtype=acc)
    for b in range(B):
        for h in range(H):
            bt, ht = torch.tensor(b), torch.tensor(h)
            n_q = -(-L // Q_BLOCK)
            for qb in range(n_q):
                rows = torch.arange(qb * Q_BLOCK, min(L, (qb + 1) * Q_BLOCK))
                if rows.numel() == 0:
                    continue
                if block_mask is None:
                    todo = [(0, True)]
                else:
                    mb = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
                    mh = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
                    if qb >= block_mask.kv_num_blocks.shape[2]:
                        continue
                    cnt = int(block_mask.kv_num_blocks[mb, mh, qb])
                    todo = [(j, False) for j in block_mask.kv_indices[mb, mh, qb, :cnt].tolist()]
                    if block_mask.full_kv_num_blocks is not None:
                        cnt = int(block_mask.full_kv_num_blocks[mb, mh, qb])
                        todo += [(j, True) for j in block_mask.full_kv_indices[mb, mh, qb, :cnt].tolist()]
                qt = query[b, h, rows].to(acc)
                m_i = torch.full((rows.numel(), 1), -math.inf, dtype=acc)
                l_i = torch.zeros((rows.numel(), 1), dtype=acc)
                o_i = torch.zeros((rows.numel(), Ev), dtype=acc)
                for kb, full in todo:
                    cols = torch.arange(kb * KV_BLOCK, min(S, (kb + 1) * KV_BLOCK))
                    if cols.numel() == 0:
                        continue
                    s = qt @ key[b, h // rep, cols].to(acc).T * scale
                    if score_fn is not None:
                        s = score_fn(s, bt, ht, rows, cols).to(acc)
                    if not full:
                        s = s.masked_fill(~mask_fn(bt, ht, rows, cols).bool(), -math.inf)
                    m_new = torch.maximum(m_i, s.amax(-1, keepdim=True))
                    m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                    corr = torch.exp(m_i - m_ref)
                    p = torch.exp(s - m_ref)
                    l_i = l_i * corr + p.sum(-1, keepdim=True)
                    o_i = o_i * corr + p @ value[b, h // rep, cols].to(acc)
                    m_i = m_new
                good = l_i > 0
                out[b, h, rows] = o_i / torch.where(good, l_i, torch.ones_like(l_i))
                lse[b, h, rows] = torch.where(good, m_i + torch.log(torch.where(good, l_i, torch.ones_like(l_i))),
                                              torch.full_like(m_i, -math.inf)).squeeze(-1)
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
