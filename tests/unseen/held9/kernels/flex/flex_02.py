TRUTH = {'api': 'flex',
 'bugs': ['the per-q-block output accumulator is a bfloat16 buffer updated in place, so out is rounded to bf16 at '
          'every kv block for all dtypes (float32/float64 out ~1e-3 relative error)'],
 'kind': 'precision'}

import math
import torch


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    dt = query.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    Ev = value.shape[-1]
    g = H // Hkv if enable_gqa else 1
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        kvn, kvi = block_mask.kv_num_blocks, block_mask.kv_indices
        fn, fi = block_mask.full_kv_num_blocks, block_mask.full_kv_indices
        mask_mod = block_mask.mask_mod
    else:
        QB, KB = 128, 128
    nq = (L + QB - 1) // QB
    nk = (S + KB - 1) // KB
    out = torch.zeros(B, H, L, Ev, dtype=cd)
    lse = torch.full((B, H, L), -math.inf, dtype=cd)
    for b in range(B):
        for h in range(H):
            q = query[b, h].to(cd)
            k = key[b, h // g].to(cd)
            v = value[b, h // g].to(cd)
            mb = 0 if block_mask is None or kvn.shape[0] == 1 else b
            mh = 0 if block_mask is None or kvn.shape[1] == 1 else h
            for qb in range(nq):
                i0, i1 = qb * QB, min(L, qb * QB + QB)
                visits = []
                if block_mask is None:
                    visits = [(j, False) for j in range(nk)]
                else:
                    visits = [(int(kvi[mb, mh, qb, c]), True) for c in range(int(kvn[mb, mh, qb]))]
                    if fn is not None:
                        visits += [(int(fi[mb, mh, qb, c]), False) for c in range(int(fn[mb, mh, qb]))]
                qt = q[i0:i1]
                m = torch.full((i1 - i0,), -math.inf, dtype=cd)
                l = torch.zeros(i1 - i0, dtype=cd)
                acc = torch.zeros(i1 - i0, Ev, dtype=torch.bfloat16)
                qi = torch.arange(i0, i1).view(-1, 1)
                bt, ht = torch.tensor(b), torch.tensor(h)
                for kb, partial in visits:
                    j0, j1 = kb * KB, min(S, kb * KB + KB)
                    ki = torch.arange(j0, j1).view(1, -1)
                    s = torch.matmul(qt, k[j0:j1].t()) * sc
                    if score_mod is not None:
                        s = score_mod(s, bt, ht, qi, ki).to(cd)
                    if partial:
                        s = s.masked_fill(~mask_mod(bt, ht, qi, ki), -math.inf)
                    m_new = torch.maximum(m, s.amax(dim=-1))
                    m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                    alpha = torch.exp(m - m_use)
                    p = torch.exp(s - m_use[:, None])
                    l = l * alpha + p.sum(dim=-1)
                    acc.mul_(alpha[:, None]).add_(torch.matmul(p, v[j0:j1]))
                    m = m_new
                seen = l > 0
                l_use = torch.where(seen, l, torch.ones_like(l))
                out[b, h, i0:i1] = acc / l_use[:, None]
                lse[b, h, i0:i1] = torch.where(seen, m + torch.log(l_use), torch.full_like(l, -math.inf))
    out = out.to(dt)
    if return_lse:
        return out, lse
    return out
