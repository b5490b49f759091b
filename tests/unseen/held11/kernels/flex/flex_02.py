TRUTH = {'api': 'flex', 'bugs': ['for each query block the full kv blocks are taken as the whole full_kv_indices row instead of its first full_kv_num_blocks entries; the padding entries of that row are then processed as full (unmasked) blocks, exposing hidden keys and counting some partial blocks twice; wrong on every block mask whose rows do not use all kv blocks as full blocks (causal_bm11, causal_bs32_64, window_bh_bs64, alibi_causal, gqa_headmask, prefix_L<S, docmask_emptyrows)'], 'kind': 'semantic'}
import math

import torch


def _block_rows(bm, b, h):
    bb = b if bm.kv_num_blocks.shape[0] > 1 else 0
    hh = h if bm.kv_num_blocks.shape[1] > 1 else 0
    part_n = bm.kv_num_blocks[bb, hh]
    part_i = bm.kv_indices[bb, hh]
    if bm.full_kv_num_blocks is None:
        return part_n, part_i, None
    return part_n, part_i, bm.full_kv_indices[bb, hh]


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    Ev = value.shape[-1]
    g = H // Hkv if enable_gqa else 1
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(E)
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
    else:
        QB, KB = 128, 128

    out = torch.zeros(B, H, L, Ev, dtype=ct)
    lse = torch.full((B, H, L), float('-inf'), dtype=ct)
    for b in range(B):
        for h in range(H):
            qh = query[b, h].to(ct)
            kh = key[b, h // g].to(ct)
            vh = value[b, h // g].to(ct)
            if block_mask is not None:
                part_n, part_i, full_i = _block_rows(block_mask, b, h)
            for qb in range((L + QB - 1) // QB):
                q0, q1 = qb * QB, min((qb + 1) * QB, L)
                if block_mask is not None:
                    work = [(int(j), True) for j in part_i[qb, :int(part_n[qb])]]
                    if full_i is not None:
                        work += [(int(j), False) for j in full_i[qb]]
                else:
                    work = [(j, False) for j in range((S + KB - 1) // KB)]
                qi = torch.arange(q0, q1).view(-1, 1)
                m = torch.full((q1 - q0, 1), float('-inf'), dtype=ct)
                l = torch.zeros(q1 - q0, 1, dtype=ct)
                acc = torch.zeros(q1 - q0, Ev, dtype=ct)
                for kb, needs_mask in work:
                    k0, k1 = kb * KB, min((kb + 1) * KB, S)
                    kj = torch.arange(k0, k1).view(1, -1)
                    s = (qh[q0:q1] @ kh[k0:k1].T) * sm_scale
                    if score_mod is not None:
                        s = score_mod(s, torch.tensor(b), torch.tensor(h), qi, kj).to(ct)
                    if needs_mask:
                        s = s.masked_fill(~block_mask.mask_mod(torch.tensor(b), torch.tensor(h), qi, kj),
                                          float('-inf'))
                    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                    m_ok = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
                    corr = torch.exp(m - m_ok)
                    p = torch.exp(s - m_ok)
                    l = l * corr + p.sum(-1, keepdim=True)
                    acc = acc * corr + p @ vh[k0:k1]
                    m = m_new
                out[b, h, q0:q1] = acc / torch.where(l > 0, l, torch.ones_like(l))
                m_ok = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
                lse[b, h, q0:q1] = (m_ok + torch.log(l)).squeeze(-1)
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
