TRUTH = {'api': 'flex', 'bugs': ['in the block-sparse online softmax the rescale factor is exp(m_old - m_new) with the unguarded running max; for a query row that has not yet seen any unmasked key (its first visited partial block is fully masked by mask_mod for that row) both are -inf and the factor is NaN, poisoning that row\'s output and lse; shows on rows whose first visited block hides them (docmask_emptyrows, gqa_headmask, window_bh_bs64)'], 'kind': 'semantic'}
import math

import torch


def _kv_schedule(bm, b, h, qb):
    bb = min(b, bm.kv_num_blocks.shape[0] - 1)
    hh = min(h, bm.kv_num_blocks.shape[1] - 1)
    sched = [(int(j), True) for j in bm.kv_indices[bb, hh, qb, :int(bm.kv_num_blocks[bb, hh, qb])]]
    if bm.full_kv_num_blocks is not None:
        n = int(bm.full_kv_num_blocks[bb, hh, qb])
        sched += [(int(j), False) for j in bm.full_kv_indices[bb, hh, qb, :n]]
    return sched


def _run_row_block(q, k, v, sched, kbs, S, scale, score_mod, mask_mod, b, h, q0):
    n, Ev = q.shape[0], v.shape[-1]
    bt, ht = torch.tensor(b), torch.tensor(h)
    qi = torch.arange(q0, q0 + n).view(-1, 1)
    m = torch.full((n, 1), float('-inf'), dtype=q.dtype)
    l = torch.zeros((n, 1), dtype=q.dtype)
    acc = torch.zeros((n, Ev), dtype=q.dtype)
    for kb, partial in sched:
        k0, k1 = kb * kbs, min(kb * kbs + kbs, S)
        kj = torch.arange(k0, k1).view(1, -1)
        s = (q @ k[k0:k1].T) * scale
        if score_mod is not None:
            s = score_mod(s, bt, ht, qi, kj).to(q.dtype)
        if partial:
            s = torch.where(mask_mod(bt, ht, qi, kj), s, torch.full_like(s, float('-inf')))
        m_new = torch.maximum(m, s.amax(dim=1, keepdim=True))
        alpha = torch.exp(m - m_new)
        m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - m_use)
        l = alpha * l + p.sum(dim=1, keepdim=True)
        acc = alpha * acc + p @ v[k0:k1]
        m = m_new
    o = acc / torch.where(l > 0, l, torch.ones_like(l))
    m_use = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    return o, (m_use + torch.log(l)).squeeze(1)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    rep = H // Hkv if enable_gqa else 1
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    qbs, kbs = block_mask.BLOCK_SIZE if block_mask is not None else (128, 128)
    n_qb, n_kb = -(-L // qbs), -(-S // kbs)

    out = torch.empty(B, H, L, value.shape[-1], dtype=ct)
    lse = torch.empty(B, H, L, dtype=ct)
    for b in range(B):
        for h in range(H):
            q_bh = query[b, h].to(ct)
            k_bh = key[b, h // rep].to(ct)
            v_bh = value[b, h // rep].to(ct)
            for qb in range(n_qb):
                q0, q1 = qb * qbs, min(qb * qbs + qbs, L)
                if block_mask is None:
                    sched = [(j, False) for j in range(n_kb)]
                    mm = None
                else:
                    sched = _kv_schedule(block_mask, b, h, qb)
                    mm = block_mask.mask_mod
                o, row_lse = _run_row_block(q_bh[q0:q1], k_bh, v_bh, sched, kbs, S, scale, score_mod, mm, b, h, q0)
                out[b, h, q0:q1] = o
                lse[b, h, q0:q1] = row_lse
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
