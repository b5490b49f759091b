"""Block-sparse FlexAttention forward: for every query block, loop over the rows of kv_indices (partial blocks,
mask_mod applied) and full_kv_indices (no mask_mod), online softmax in float32."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "the partial-block loop walks the whole padded kv_indices row instead of its first kv_num_blocks "
        "entries, so leftover padding entries add extra blocks (including blocks that are already full, whose "
        "keys are then counted twice)"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[-1]
    f = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    g = H // Hkv if enable_gqa else 1
    dev = query.device
    if score_mod is not None:
        sm = torch.vmap(torch.vmap(score_mod, in_dims=(0, None, None, None, 0)), in_dims=(0, None, None, 0, None))
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        mm = torch.vmap(torch.vmap(block_mask.mask_mod, in_dims=(None, None, None, 0)),
                        in_dims=(None, None, 0, None))
    else:
        QB, KB = L, S
    out = torch.empty(B, H, L, Ev, dtype=query.dtype, device=dev)
    lse = torch.empty(B, H, L, dtype=f, device=dev)
    for b in range(B):
        for h in range(H):
            tb, th = torch.tensor(b), torch.tensor(h)
            for qb in range(-(-L // QB)):
                rows = torch.arange(qb * QB, min(L, (qb + 1) * QB), device=dev)
                if block_mask is None:
                    work = [(0, True)]
                else:
                    bi = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
                    hi = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
                    work = [(int(j), False) for j in block_mask.kv_indices[bi, hi, qb]]
                    if block_mask.full_kv_indices is not None:
                        nf = int(block_mask.full_kv_num_blocks[bi, hi, qb])
                        work += [(int(j), True) for j in block_mask.full_kv_indices[bi, hi, qb, :nf]]
                qt = query[b, h, rows].to(f)
                m = torch.full((rows.numel(), 1), -math.inf, dtype=f, device=dev)
                run_l = torch.zeros((rows.numel(), 1), dtype=f, device=dev)
                o = torch.zeros((rows.numel(), Ev), dtype=f, device=dev)
                for kb, is_full in work:
                    cols = torch.arange(kb * KB, min(S, (kb + 1) * KB), device=dev)
                    if cols.numel() == 0:
                        continue
                    s = qt @ key[b, h // g, cols].to(f).T * scale
                    if score_mod is not None:
                        s = sm(s, tb, th, rows, cols).to(f)
                    if not is_full:
                        s = s.masked_fill(~mm(tb, th, rows, cols).bool(), -math.inf)
                    mn = torch.maximum(m, s.amax(-1, keepdim=True))
                    mu = torch.where(torch.isinf(mn), torch.zeros_like(mn), mn)
                    a = torch.exp(m - mu)
                    p = torch.exp(s - mu)
                    run_l = run_l * a + p.sum(-1, keepdim=True)
                    o = o * a + p @ value[b, h // g, cols].to(f)
                    m = mn
                ok = run_l > 0
                out[b, h, rows] = (o / torch.where(ok, run_l, torch.ones_like(run_l))).to(query.dtype)
                lse[b, h, rows] = torch.where(ok, m + torch.log(torch.where(ok, run_l, torch.ones_like(run_l))),
                                              torch.full_like(m, -math.inf)).squeeze(-1)
    return (out, lse) if return_lse else out
