import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [],
    "kind": "correct"
}


DEFAULT_BLOCK = 128


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    """Block-sparse walk: for every (batch, head, query block) visit only the key blocks the BlockMask lists."""
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[-1]
    sm = scale if scale is not None else E ** -0.5
    acc_t = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(acc_t), key.to(acc_t), value.to(acc_t)
    grp = H // Hkv if enable_gqa else 1

    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
    else:
        QB = KB = DEFAULT_BLOCK
    nq = (L + QB - 1) // QB
    nk = (S + KB - 1) // KB

    def listing(b, h, qb):
        """[(kv block, needs mask_mod)] for one query block."""
        if block_mask is None:
            return [(j, False) for j in range(nk)]
        bb = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
        hh = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
        res = [(int(j), True) for j in block_mask.kv_indices[bb, hh, qb, :int(block_mask.kv_num_blocks[bb, hh, qb])]]
        if block_mask.full_kv_num_blocks is not None:
            n = int(block_mask.full_kv_num_blocks[bb, hh, qb])
            res += [(int(j), False) for j in block_mask.full_kv_indices[bb, hh, qb, :n]]
        return res

    out = torch.zeros(B, H, L, Ev, dtype=acc_t)
    lse = torch.full((B, H, L), float('-inf'), dtype=acc_t)
    for b in range(B):
        bt = torch.tensor(b)
        for h in range(H):
            ht = torch.tensor(h)
            hk = h // grp
            for qb in range(nq):
                q0, q1 = qb * QB, min(L, (qb + 1) * QB)
                qt = q[b, h, q0:q1]
                qidx = torch.arange(q0, q1)[:, None]
                m = torch.full((q1 - q0, 1), float('-inf'), dtype=acc_t)
                l = torch.zeros(q1 - q0, 1, dtype=acc_t)
                acc = torch.zeros(q1 - q0, Ev, dtype=acc_t)
                for kb, partial in listing(b, h, qb):
                    k0, k1 = kb * KB, min(S, (kb + 1) * KB)
                    if k0 >= k1:
                        continue
                    kidx = torch.arange(k0, k1)[None, :]
                    s = torch.matmul(qt, k[b, hk, k0:k1].t()) * sm
                    if score_mod is not None:
                        s = score_mod(s, bt, ht, qidx, kidx).to(acc_t)
                    if partial:
                        s = s.masked_fill(~block_mask.mask_mod(bt, ht, qidx, kidx), float('-inf'))
                    mn = torch.maximum(m, s.amax(-1, keepdim=True))
                    ref = torch.where(torch.isinf(mn), torch.zeros_like(mn), mn)
                    p = torch.exp(s - ref)
                    c = torch.exp(m - ref)
                    l = l * c + p.sum(-1, keepdim=True)
                    acc = acc * c + torch.matmul(p, v[b, hk, k0:k1])
                    m = mn
                nz = l > 0
                l1 = torch.where(nz, l, torch.ones_like(l))
                out[b, h, q0:q1] = acc / l1
                lse[b, h, q0:q1] = torch.where(nz, m + torch.log(l1), torch.full_like(l, float('-inf')))[:, 0]
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
