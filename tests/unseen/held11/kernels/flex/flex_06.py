TRUTH = {'api': 'flex', 'bugs': ['without a block_mask the kernel builds an all-full block grid with cdiv(L, BLOCK) kv blocks (query length) instead of cdiv(S, BLOCK); when S > L the trailing keys are never visited (relbias_scoremod, L=96 < S=160)', 'the softmax runs in base 2 (exp2 of scores * log2(e)) and the returned lse is m2 + log2(l), still in base-2 units, instead of (m2 + log2(l)) * ln(2); lse is wrong on every case (output is right)'], 'kind': 'two'}
import math

import torch

LOG2E = 1.4426950408889634
BLOCK = 128


def _block_state(block_mask, n_qb, n_kb):
    """(nb, nh, n_qb, n_kb) int8: 0 skip, 1 partial, 2 full."""
    if block_mask is None:
        return torch.full((1, 1, n_qb, n_kb), 2, dtype=torch.int8)
    nkb = block_mask.kv_indices.shape[-1]
    slots = torch.arange(nkb)
    st = torch.zeros(block_mask.kv_indices.shape[:-1] + (nkb,), dtype=torch.int8)
    st.scatter_(-1, block_mask.kv_indices.long(),
                (slots < block_mask.kv_num_blocks.unsqueeze(-1)).to(torch.int8))
    if block_mask.full_kv_num_blocks is not None:
        fl = torch.zeros_like(st).scatter_(-1, block_mask.full_kv_indices.long(),
                                           (slots < block_mask.full_kv_num_blocks.unsqueeze(-1)).to(torch.int8) * 2)
        st = torch.maximum(st, fl)
    return st


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    ft = torch.float64 if query.dtype == torch.float64 else torch.float32
    q = query.to(ft)
    k = key.to(ft)
    v = value.to(ft)
    if enable_gqa and H != Hkv:
        k = k.repeat_interleave(H // Hkv, 1)
        v = v.repeat_interleave(H // Hkv, 1)
    QB, KB = block_mask.BLOCK_SIZE if block_mask is not None else (BLOCK, BLOCK)
    n_qb = (L + QB - 1) // QB
    n_kb = (S + KB - 1) // KB if block_mask is not None else (L + KB - 1) // KB
    state = _block_state(block_mask, n_qb, n_kb)
    bi = torch.arange(B).view(B, 1, 1, 1)
    hi = torch.arange(H).view(1, H, 1, 1)

    out_blocks, lse_blocks = [], []
    for qb in range(n_qb):
        q0, q1 = qb * QB, min(qb * QB + QB, L)
        qi = torch.arange(q0, q1).view(1, 1, -1, 1)
        m2 = torch.full((B, H, q1 - q0, 1), float('-inf'), dtype=ft)
        l = torch.zeros_like(m2)
        acc = torch.zeros(B, H, q1 - q0, v.shape[-1], dtype=ft)
        for kb in range(n_kb):
            st = state[:, :, qb, kb].view(state.shape[0], state.shape[1], 1, 1)
            if not bool((st > 0).any()):
                continue
            k0, k1 = kb * KB, min(kb * KB + KB, S)
            kj = torch.arange(k0, k1).view(1, 1, 1, -1)
            s = torch.matmul(q[:, :, q0:q1], k[:, :, k0:k1].transpose(-1, -2)) * scale
            if score_mod is not None:
                s = score_mod(s, bi, hi, qi, kj).to(ft)
            keep = st == 2
            if block_mask is not None:
                keep = keep | ((st == 1) & block_mask.mask_mod(bi, hi, qi, kj))
            s2 = torch.where(keep, s * LOG2E, torch.full_like(s, float('-inf')))
            m_new = torch.maximum(m2, s2.amax(-1, keepdim=True))
            m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp2(m2 - m_use)
            p = torch.exp2(s2 - m_use)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + torch.matmul(p, v[:, :, k0:k1])
            m2 = m_new
        out_blocks.append(acc / torch.where(l > 0, l, torch.ones_like(l)))
        m_use = torch.where(torch.isneginf(m2), torch.zeros_like(m2), m2)
        lse_blocks.append((m_use + torch.log2(l)).squeeze(-1))
    out = torch.cat(out_blocks, 2).to(query.dtype)
    lse = torch.cat(lse_blocks, 2)
    if return_lse:
        return out, lse
    return out
