"""flex_attention, block-sparse: for every (batch, head, query block) walk the BlockMask's partial blocks (mask_mod
evaluated) and full blocks (no mask_mod), online softmax across the visited key blocks, score_mod on the scaled
scores."""
import math

import torch

TRUTH = {
    'api': 'flex',
    'bugs': [
    ],
    'kind': 'correct',
}

NEG_INF = float('-inf')
DEFAULT_BLOCK = 128


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[-1]
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(E)
    wd = torch.float64 if query.dtype == torch.float64 else torch.float32
    group = H // Hkv
    q, k, v = query.to(wd), key.to(wd), value.to(wd)
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
    else:
        QB, KB = DEFAULT_BLOCK, DEFAULT_BLOCK
    n_kv_blocks = (S + KB - 1) // KB
    out = torch.zeros(B, H, L, Ev, dtype=wd)
    lse = torch.full((B, H, L), NEG_INF, dtype=wd)
    for b in range(B):
        for h in range(H):
            hk = h // group
            bt, ht = torch.tensor(b), torch.tensor(h)
            if block_mask is not None:
                mb = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
                mh = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
            for qb in range(0, (L + QB - 1) // QB):
                i0, i1 = qb * QB, min((qb + 1) * QB, L)
                rows = torch.arange(i0, i1)[:, None]
                if block_mask is None:
                    todo = [(j, False) for j in range(n_kv_blocks)]
                else:
                    n_part = int(block_mask.kv_num_blocks[mb, mh, qb])
                    todo = [(int(j), True) for j in block_mask.kv_indices[mb, mh, qb, :n_part]]
                    if block_mask.full_kv_num_blocks is not None:
                        n_full = int(block_mask.full_kv_num_blocks[mb, mh, qb])
                        todo += [(int(j), False) for j in block_mask.full_kv_indices[mb, mh, qb, :n_full]]
                qi = q[b, h, i0:i1]
                m = torch.full((i1 - i0, 1), NEG_INF, dtype=wd)
                l = torch.zeros(i1 - i0, 1, dtype=wd)
                acc = torch.zeros(i1 - i0, Ev, dtype=wd)
                for kb, partial in todo:
                    j0, j1 = kb * KB, min((kb + 1) * KB, S)
                    cols = torch.arange(j0, j1)[None, :]
                    s = torch.matmul(qi, k[b, hk, j0:j1].transpose(0, 1)) * sm_scale
                    if score_mod is not None:
                        s = score_mod(s, bt, ht, rows, cols).to(wd)
                    if partial:
                        keep = block_mask.mask_mod(bt, ht, rows, cols)
                        s = s.masked_fill(~keep.expand(s.shape), NEG_INF)
                    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                    m_ref = torch.where(m_new == NEG_INF, torch.zeros_like(m_new), m_new)
                    p = torch.exp(s - m_ref)
                    c = torch.exp(m - m_ref)
                    l = l * c + p.sum(-1, keepdim=True)
                    acc = acc * c + torch.matmul(p, v[b, hk, j0:j1])
                    m = m_new
                seen = l > 0
                l1 = torch.where(seen, l, torch.ones_like(l))
                out[b, h, i0:i1] = acc / l1
                lse[b, h, i0:i1] = torch.where(seen, m + torch.log(l1), torch.full_like(m, NEG_INF)).squeeze(-1)
    out = out.to(query.dtype)
    if return_lse:
        return out, (lse if query.dtype == torch.float64 else lse.float())
    return out
