import math

import torch

TRUTH = {"api": "flex", "bugs": [], "kind": "correct"}

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
DENSE_BLOCK = 128


def _block_lists(block_mask, b, h, qb, n_kv_blocks):
    """(kv block, needs mask_mod) pairs for one query block, honouring batch/head broadcast of the BlockMask."""
    if block_mask is None:
        return [(j, False) for j in range(n_kv_blocks)]
    kv_num = block_mask.kv_num_blocks
    bb = b if kv_num.shape[0] > 1 else 0
    hh = h if kv_num.shape[1] > 1 else 0
    blocks = []
    n = int(kv_num[bb, hh, qb])
    blocks += [(int(j), True) for j in block_mask.kv_indices[bb, hh, qb, :n]]
    if block_mask.full_kv_num_blocks is not None:
        nf = int(block_mask.full_kv_num_blocks[bb, hh, qb])
        blocks += [(int(j), False) for j in block_mask.full_kv_indices[bb, hh, qb, :nf]]
    return blocks


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[3]
    if H != Hkv and not enable_gqa:
        raise ValueError("enable_gqa=False requires matching heads")
    group = H // Hkv
    acc_t = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    if block_mask is None:
        QB, KB = DENSE_BLOCK, DENSE_BLOCK
        mask_mod = None
    else:
        QB, KB = block_mask.BLOCK_SIZE
        mask_mod = block_mask.mask_mod
    n_kv_blocks = -(-S // KB)
    out = torch.zeros(B, H, L, Ev, dtype=query.dtype, device=query.device)
    lse = torch.full((B, H, L), -math.inf, dtype=acc_t, device=query.device)
    dev = query.device
    for b in range(B):
        b_idx = torch.tensor(b, device=dev)
        for h in range(H):
            h_idx = torch.tensor(h, device=dev)
            hk = h // group
            for qb in range(-(-L // QB)):
                q0, q1 = qb * QB, min((qb + 1) * QB, L)
                qt = query[b, h, q0:q1].to(acc_t)
                q_idx = torch.arange(q0, q1, device=dev)[:, None]
                m_i = torch.full((q1 - q0,), -math.inf, dtype=acc_t, device=dev)
                l_i = torch.zeros(q1 - q0, dtype=acc_t, device=dev)
                acc = torch.zeros(q1 - q0, Ev, dtype=acc_t, device=dev)
                for kvb, partial in _block_lists(block_mask, b, h, qb, n_kv_blocks):
                    k0, k1 = kvb * KB, min((kvb + 1) * KB, S)
                    if k0 >= k1:
                        continue
                    kv_idx = torch.arange(k0, k1, device=dev)[None, :]
                    s = torch.matmul(qt, key[b, hk, k0:k1].to(acc_t).t()) * scale
                    if score_mod is not None:
                        s = score_mod(s, b_idx, h_idx, q_idx, kv_idx)
                    if partial:
                        s = s.masked_fill(~mask_mod(b_idx, h_idx, q_idx, kv_idx), -math.inf)
                    s = s * LOG2E
                    m_new = torch.maximum(m_i, s.amax(-1))
                    m_ref = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
                    p = torch.exp2(s - m_ref[:, None])
                    alpha = torch.exp2(m_i - m_ref)
                    l_i = l_i * alpha + p.sum(-1)
                    acc = acc * alpha[:, None] + torch.matmul(p, value[b, hk, k0:k1].to(acc_t))
                    m_i = m_new
                alive = l_i > 0
                l_safe = torch.where(alive, l_i, torch.ones_like(l_i))
                out[b, h, q0:q1] = (acc / l_safe[:, None]).to(query.dtype)
                lse[b, h, q0:q1] = torch.where(alive, (m_i + torch.log2(l_safe)) * LN2, lse[b, h, q0:q1])
    if return_lse:
        return out, lse
    return out
