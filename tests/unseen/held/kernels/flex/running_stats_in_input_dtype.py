"""Block-sparse FlexAttention with an online softmax across the kv blocks of each q block (like the Triton template).

The running max and running sum live in per-row buffers created with the query's dtype/device; the accumulator is
float32.
"""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "the running max and running sum are allocated with query.dtype, so in bfloat16/float16 the softmax "
        "denominator is rounded after every kv block and on long rows the output and lse errors are several times "
        "PyTorch's"
    ],
    "kind": "precision",
}


def _tiles(fn, score):
    if score:
        return torch.vmap(torch.vmap(fn, in_dims=(0, None, None, None, 0)), in_dims=(0, None, None, 0, None))
    return torch.vmap(torch.vmap(fn, in_dims=(None, None, None, 0)), in_dims=(None, None, 0, None))


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    dev = query.device
    acc_t = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    grp = H // Hkv if enable_gqa else 1
    smod = _tiles(score_mod, True) if score_mod is not None else None
    QB, KB = block_mask.BLOCK_SIZE if block_mask is not None else (L, S)
    mmod = _tiles(block_mask.mask_mod, False) if block_mask is not None else None
    out = torch.zeros(B, H, L, value.shape[-1], dtype=acc_t, device=dev)
    lse = torch.full((B, H, L), -math.inf, dtype=acc_t, device=dev)
    for b in range(B):
        for h in range(H):
            tb, th = torch.tensor(b), torch.tensor(h)
            for qb in range((L + QB - 1) // QB):
                r0, r1 = qb * QB, min(L, (qb + 1) * QB)
                rows = torch.arange(r0, r1, device=dev)
                work = []                                   # (kv block, needs mask_mod)
                if block_mask is None:
                    work = [(0, False)]
                else:
                    bi = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
                    hi = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
                    n = int(block_mask.kv_num_blocks[bi, hi, qb])
                    work += [(kb, True) for kb in block_mask.kv_indices[bi, hi, qb, :n].tolist()]
                    if block_mask.full_kv_num_blocks is not None:
                        n = int(block_mask.full_kv_num_blocks[bi, hi, qb])
                        work += [(kb, False) for kb in block_mask.full_kv_indices[bi, hi, qb, :n].tolist()]
                m_i = torch.full((r1 - r0, 1), -math.inf, dtype=query.dtype, device=dev)
                l_i = torch.zeros((r1 - r0, 1), dtype=query.dtype, device=dev)
                acc = torch.zeros((r1 - r0, value.shape[-1]), dtype=acc_t, device=dev)
                qt = query[b, h, r0:r1].to(acc_t)
                for kb, partial in work:
                    c0, c1 = kb * KB, min(S, (kb + 1) * KB)
                    cols = torch.arange(c0, c1, device=dev)
                    s = qt @ key[b, h // grp, c0:c1].to(acc_t).t() * scale
                    if smod is not None:
                        s = smod(s, tb, th, rows, cols).to(acc_t)
                    if partial:
                        s = s.masked_fill(~mmod(tb, th, rows, cols).to(torch.bool), -math.inf)
                    m_old = m_i.to(acc_t)
                    m_new = torch.maximum(m_old, s.amax(-1, keepdim=True)).to(m_i.dtype).to(acc_t)
                    m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                    alpha = torch.exp(m_old - m_use)
                    p = torch.exp(s - m_use)
                    l_i = (l_i.to(acc_t) * alpha + p.sum(-1, keepdim=True)).to(l_i.dtype)
                    acc = acc * alpha + p @ value[b, h // grp, c0:c1].to(acc_t)
                    m_i = m_new.to(m_i.dtype)
                l_f = l_i.to(acc_t)
                out[b, h, r0:r1] = acc / torch.where(l_f > 0, l_f, torch.ones_like(l_f))
                m_f = m_i.to(acc_t)
                m_f = torch.where(torch.isinf(m_f), torch.zeros_like(m_f), m_f)
                lse[b, h, r0:r1] = (m_f + torch.log(l_f)).squeeze(-1)
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
