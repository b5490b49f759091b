TRUTH = {'api': 'flex', 'bugs': [], 'kind': 'correct'}
import math
import torch

DEFAULT_BLOCK = 128


def _blocks(block_mask, b, h, qb, nkb):
    """(kv block, needs mask_mod) pairs for one query block."""
    if block_mask is None:
        return [(j, False) for j in range(nkb)]
    bb = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
    hh = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
    todo = []
    n = int(block_mask.kv_num_blocks[bb, hh, qb])
    todo += [(int(j), True) for j in block_mask.kv_indices[bb, hh, qb, :n]]
    if block_mask.full_kv_num_blocks is not None:
        n = int(block_mask.full_kv_num_blocks[bb, hh, qb])
        todo += [(int(j), False) for j in block_mask.full_kv_indices[bb, hh, qb, :n]]
    return todo


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[3]
    cdt = torch.float32 if query.dtype == torch.bfloat16 else query.dtype
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    group = H // Hkv
    if block_mask is None:
        QB = KB = DEFAULT_BLOCK
    else:
        QB, KB = block_mask.BLOCK_SIZE
    nqb = (L + QB - 1) // QB
    nkb = (S + KB - 1) // KB
    out = torch.zeros(B, H, L, Ev, dtype=cdt)
    lse = torch.full((B, H, L), -math.inf, dtype=cdt)
    for b in range(B):
        for h in range(H):
            hk = h // group
            for qb in range(nqb):
                q0, q1 = qb * QB, min(qb * QB + QB, L)
                qt = query[b, h, q0:q1].to(cdt)
                qi = torch.arange(q0, q1)[:, None]
                m = torch.full((q1 - q0, 1), -math.inf, dtype=cdt)
                l = torch.zeros((q1 - q0, 1), dtype=cdt)
                acc = torch.zeros((q1 - q0, Ev), dtype=cdt)
                for kb, masked in _blocks(block_mask, b, h, qb, nkb):
                    k0, k1 = kb * KB, min(kb * KB + KB, S)
                    if k0 >= k1:
                        continue
                    kt = key[b, hk, k0:k1].to(cdt)
                    vt = value[b, hk, k0:k1].to(cdt)
                    ki = torch.arange(k0, k1)[None, :]
                    s = torch.matmul(qt, kt.t()) * sc
                    if score_mod is not None:
                        s = score_mod(s, torch.tensor(b), torch.tensor(h), qi, ki).to(cdt)
                    if masked:
                        keep = block_mask.mask_mod(torch.tensor(b), torch.tensor(h), qi, ki)
                        s = s.masked_fill(~keep, -math.inf)
                    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                    m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                    corr = torch.exp(m - m_use)
                    p = torch.exp(s - m_use)
                    l = l * corr + p.sum(-1, keepdim=True)
                    acc = acc * corr + torch.matmul(p, vt)
                    m = m_new
                pos = l > 0
                out[b, h, q0:q1] = acc / torch.where(pos, l, torch.ones_like(l))
                lse[b, h, q0:q1] = torch.where(pos, m + torch.log(l), torch.full_like(l, -math.inf)).squeeze(-1)
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
