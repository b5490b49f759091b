TRUTH = {'api': 'flex', 'bugs': [], 'kind': 'correct'}
import math

import torch


def _kv_lists(block_mask, B, H):
    nb, nh = block_mask.kv_num_blocks.shape[:2]

    def grow(x):
        return None if x is None else x.expand(B if nb == 1 else nb, H if nh == 1 else nh, *x.shape[2:])

    return (grow(block_mask.kv_num_blocks), grow(block_mask.kv_indices),
            grow(block_mask.full_kv_num_blocks), grow(block_mask.full_kv_indices))


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    Ev = value.shape[-1]
    G = H // Hkv if enable_gqa else 1
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    acc_t = torch.float64 if query.dtype == torch.float64 else torch.float32

    if block_mask is None:
        QB, KB = L, S
        n_blk = torch.zeros(B, H, 1, dtype=torch.long)
        idx = torch.zeros(B, H, 1, 1, dtype=torch.long)
        f_blk = torch.ones(B, H, 1, dtype=torch.long)
        f_idx = torch.zeros(B, H, 1, 1, dtype=torch.long)
        mask_mod = None
    else:
        QB, KB = block_mask.BLOCK_SIZE
        n_blk, idx, f_blk, f_idx = _kv_lists(block_mask, B, H)
        mask_mod = block_mask.mask_mod

    out = torch.zeros(B, H, L, Ev, dtype=acc_t)
    lse = torch.full((B, H, L), float('-inf'), dtype=acc_t)
    for b in range(B):
        for h in range(H):
            qh = query[b, h].to(acc_t)
            kh = key[b, h // G].to(acc_t)
            vh = value[b, h // G].to(acc_t)
            bt, ht = torch.tensor(b), torch.tensor(h)
            for qb in range((L + QB - 1) // QB):
                q0, q1 = qb * QB, min(qb * QB + QB, L)
                rows = torch.arange(q0, q1).view(-1, 1)
                todo = [(int(j), True) for j in idx[b, h, qb, :int(n_blk[b, h, qb])]]
                if f_blk is not None:
                    todo += [(int(j), False) for j in f_idx[b, h, qb, :int(f_blk[b, h, qb])]]
                m = torch.full((q1 - q0, 1), float('-inf'), dtype=acc_t)
                l = torch.zeros(q1 - q0, 1, dtype=acc_t)
                acc = torch.zeros(q1 - q0, Ev, dtype=acc_t)
                for kb, partial in todo:
                    k0, k1 = kb * KB, min(kb * KB + KB, S)
                    cols = torch.arange(k0, k1).view(1, -1)
                    s = (qh[q0:q1] @ kh[k0:k1].T) * scale
                    if score_mod is not None:
                        s = score_mod(s, bt, ht, rows, cols).to(acc_t)
                    if partial:
                        s = s.masked_fill(~mask_mod(bt, ht, rows, cols), float('-inf'))
                    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                    m_ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
                    alpha = torch.exp(m - m_ref)
                    p = torch.exp(s - m_ref)
                    l = l * alpha + p.sum(-1, keepdim=True)
                    acc = acc * alpha + p @ vh[k0:k1]
                    m = m_new
                out[b, h, q0:q1] = acc / torch.where(l > 0, l, torch.ones_like(l))
                m_ref = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
                lse[b, h, q0:q1] = (m_ref + torch.log(l)).squeeze(-1)
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
