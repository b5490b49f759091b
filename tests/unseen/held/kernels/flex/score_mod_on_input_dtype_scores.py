"""Block-sparse FlexAttention that hands score_mod its scores in the model dtype, the way the compiled kernel's
users expect bias tables and soft-caps to see them; masking, softmax and P @ V are float32.

Kv blocks of each q block are gathered and processed together (dense softmax over the gathered keys).
"""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "the scaled scores are cast to query.dtype before score_mod and score_mod's result stays in that dtype until "
        "the softmax, so in bfloat16/float16 every modified score (soft-capped logits, large relative-position "
        "biases) is rounded to 8/11 bits and the output error is several times PyTorch's"
    ],
    "kind": "precision",
}


def _tile(fn, n_none):
    if n_none:
        inner = torch.vmap(fn, in_dims=(0, None, None, None, 0))
        return torch.vmap(inner, in_dims=(0, None, None, 0, None))
    inner = torch.vmap(fn, in_dims=(None, None, None, 0))
    return torch.vmap(inner, in_dims=(None, None, 0, None))


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    dev = query.device
    ft = torch.float64 if query.dtype == torch.float64 else torch.float32
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(E)
    g = H // Hkv if enable_gqa else 1
    smod = _tile(score_mod, True) if score_mod is not None else None
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        mmod = _tile(block_mask.mask_mod, False)
    else:
        QB, KB = L, S
    out = torch.zeros(B, H, L, value.shape[-1], dtype=ft, device=dev)
    lse = torch.full((B, H, L), -math.inf, dtype=ft, device=dev)
    for b in range(B):
        for h in range(H):
            tb, th = torch.tensor(b), torch.tensor(h)
            for qb in range((L + QB - 1) // QB):
                rows = torch.arange(qb * QB, min(L, (qb + 1) * QB), device=dev)
                segs = []
                if block_mask is None:
                    segs.append((torch.arange(S, device=dev), False))
                else:
                    bi = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
                    hi = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
                    for num, idx, partial in ((block_mask.kv_num_blocks, block_mask.kv_indices, True),
                                              (block_mask.full_kv_num_blocks, block_mask.full_kv_indices, False)):
                        if num is None:
                            continue
                        for kb in idx[bi, hi, qb, :int(num[bi, hi, qb])].tolist():
                            segs.append((torch.arange(kb * KB, min(S, (kb + 1) * KB), device=dev), partial))
                segs = [(c, pm) for c, pm in segs if c.numel()]
                if not segs:
                    continue
                cols = torch.cat([c for c, _ in segs])
                s = query[b, h, rows].to(ft) @ key[b, h // g, cols].to(ft).t() * sm_scale
                if smod is not None:
                    s = smod(s.to(query.dtype), tb, th, rows, cols).to(query.dtype)
                s = s.to(ft)
                if block_mask is not None:
                    keep = torch.cat([mmod(tb, th, rows, c).to(torch.bool) if pm
                                      else torch.ones(rows.numel(), c.numel(), dtype=torch.bool, device=dev)
                                      for c, pm in segs], dim=1)
                    s = s.masked_fill(~keep, -math.inf)
                row_lse = torch.logsumexp(s, -1)
                w = torch.exp(s - torch.where(torch.isinf(row_lse), torch.zeros_like(row_lse), row_lse)[:, None])
                out[b, h, rows] = w @ value[b, h // g, cols].to(ft)
                lse[b, h, rows] = row_lse
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
