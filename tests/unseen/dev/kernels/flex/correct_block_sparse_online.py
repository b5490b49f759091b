"""FlexAttention forward in eager PyTorch: walk each query block's partial and full kv blocks from the BlockMask,
apply score_mod / mask_mod on the tile through torch.vmap, online softmax in float32."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [],
    "kind": "correct",
}


def _tile_fn(fn, with_score):
    if with_score:
        f = torch.vmap(fn, in_dims=(0, None, None, None, 0))
        return torch.vmap(f, in_dims=(0, None, None, 0, None))
    f = torch.vmap(fn, in_dims=(None, None, None, 0))
    return torch.vmap(f, in_dims=(None, None, 0, None))


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[-1]
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    group = H // Hkv if enable_gqa else 1
    dev = query.device
    score_tile = _tile_fn(score_mod, True) if score_mod is not None else None
    if block_mask is not None:
        q_bs, kv_bs = block_mask.BLOCK_SIZE
        mask_tile = _tile_fn(block_mask.mask_mod, False)
        mB, mH = block_mask.kv_num_blocks.shape[:2]
    else:
        q_bs, kv_bs = L, S
    out = torch.zeros(B, H, L, Ev, dtype=acc, device=dev)
    lse = torch.full((B, H, L), -math.inf, dtype=acc, device=dev)
    for b in range(B):
        for h in range(H):
            hk = h // group
            bt, ht = torch.tensor(b, device=dev), torch.tensor(h, device=dev)
            for qb in range(-(-L // q_bs)):
                r0, r1 = qb * q_bs, min(L, (qb + 1) * q_bs)
                if block_mask is None:
                    blocks = [(0, True)] if S > 0 else []
                else:
                    bb, hh = (b if mB > 1 else 0), (h if mH > 1 else 0)
                    n = int(block_mask.kv_num_blocks[bb, hh, qb])
                    blocks = [(int(j), False) for j in block_mask.kv_indices[bb, hh, qb, :n]]
                    if block_mask.full_kv_num_blocks is not None:
                        n = int(block_mask.full_kv_num_blocks[bb, hh, qb])
                        blocks += [(int(j), True) for j in block_mask.full_kv_indices[bb, hh, qb, :n]]
                qt = query[b, h, r0:r1].to(acc)
                qidx = torch.arange(r0, r1, device=dev)
                m_i = torch.full((r1 - r0, 1), -math.inf, dtype=acc, device=dev)
                l_i = torch.zeros((r1 - r0, 1), dtype=acc, device=dev)
                o_i = torch.zeros((r1 - r0, Ev), dtype=acc, device=dev)
                for kb, full in blocks:
                    c0, c1 = kb * kv_bs, min(S, (kb + 1) * kv_bs)
                    if c0 >= c1:
                        continue
                    kidx = torch.arange(c0, c1, device=dev)
                    s = qt @ key[b, hk, c0:c1].to(acc).T * scale
                    if score_tile is not None:
                        s = score_tile(s, bt, ht, qidx, kidx).to(acc)
                    if not full:
                        s = s.masked_fill(~mask_tile(bt, ht, qidx, kidx).to(torch.bool), -math.inf)
                    m_new = torch.maximum(m_i, s.amax(-1, keepdim=True))
                    m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                    alpha = torch.exp(m_i - m_use)
                    p = torch.exp(s - m_use)
                    l_i = l_i * alpha + p.sum(-1, keepdim=True)
                    o_i = o_i * alpha + p @ value[b, hk, c0:c1].to(acc)
                    m_i = m_new
                has = l_i > 0
                out[b, h, r0:r1] = o_i / torch.where(has, l_i, torch.ones_like(l_i))
                lse[b, h, r0:r1] = torch.where(has, m_i + torch.log(torch.where(has, l_i, torch.ones_like(l_i))),
                                               torch.full_like(m_i, -math.inf)).squeeze(-1)
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
