"""FlexAttention forward, one (batch, head, q block) at a time: gather the listed kv blocks, torch.softmax in float32.

GQA maps each query head onto its kv head inside the loop; mask_mod is evaluated only in partial blocks.
"""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "with enable_gqa the kv head is taken as h % Hkv instead of h // (H // Hkv), so query heads read the wrong kv "
        "heads whenever H > Hkv > 1",
        "a query row that sees no key while other rows of its q block do (mask_mod hides all its keys in the listed "
        "blocks) goes through torch.softmax of an all -inf row and gets NaN output instead of zeros",
    ],
    "kind": "two",
}


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else E ** -0.5
    sm = None
    if score_mod is not None:
        sm = torch.vmap(torch.vmap(score_mod, in_dims=(0, None, None, None, 0)), in_dims=(0, None, None, 0, None))
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        mm = torch.vmap(torch.vmap(block_mask.mask_mod, in_dims=(None, None, None, 0)),
                        in_dims=(None, None, 0, None))
    else:
        QB, KB = L, S
    out = torch.zeros(B, H, L, value.shape[-1], dtype=ct)
    lse = torch.full((B, H, L), -math.inf, dtype=ct)
    for b in range(B):
        for h in range(H):
            kvh = h % Hkv if enable_gqa else h
            tb, th = torch.tensor(b), torch.tensor(h)
            for qb in range((L + QB - 1) // QB):
                rows = torch.arange(qb * QB, min(L, qb * QB + QB))
                pieces = []
                if block_mask is None:
                    pieces.append((torch.arange(S), None))
                else:
                    bi = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
                    hi = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
                    n = int(block_mask.kv_num_blocks[bi, hi, qb])
                    for kb in block_mask.kv_indices[bi, hi, qb, :n].tolist():
                        c = torch.arange(kb * KB, min(S, kb * KB + KB))
                        pieces.append((c, mm(tb, th, rows, c).to(torch.bool)))
                    if block_mask.full_kv_num_blocks is not None:
                        n = int(block_mask.full_kv_num_blocks[bi, hi, qb])
                        for kb in block_mask.full_kv_indices[bi, hi, qb, :n].tolist():
                            pieces.append((torch.arange(kb * KB, min(S, kb * KB + KB)), None))
                if not pieces:
                    continue
                cols = torch.cat([c for c, _ in pieces])
                keep = torch.cat([torch.ones(rows.numel(), c.numel(), dtype=torch.bool) if k_ is None else k_
                                  for c, k_ in pieces], dim=1)
                s = query[b, h, rows].to(ct) @ key[b, kvh, cols].to(ct).T * scale
                if sm is not None:
                    s = sm(s, tb, th, rows, cols).to(ct)
                s = s.masked_fill(~keep, float("-inf"))
                out[b, h, rows] = torch.softmax(s, dim=-1) @ value[b, kvh, cols].to(ct)
                lse[b, h, rows] = torch.logsumexp(s, dim=-1)
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
