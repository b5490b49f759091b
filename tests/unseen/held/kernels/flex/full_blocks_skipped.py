"""FlexAttention forward as a tiled online softmax over the kv blocks that the BlockMask lists for each q block.

Per listed block: scores in float32, score_mod and mask_mod vmapped over the tile, then the usual running max/sum.
"""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "only kv_num_blocks/kv_indices (the partial blocks) are visited; full_kv_num_blocks/full_kv_indices are never "
        "read, so every fully-visible block (e.g. all blocks below the diagonal of a causal mask) is dropped"
    ],
    "kind": "semantic",
}


def _vmap_tile(fn, has_score):
    if has_score:
        return torch.vmap(torch.vmap(fn, in_dims=(0, None, None, None, 0)), in_dims=(0, None, None, 0, None))
    return torch.vmap(torch.vmap(fn, in_dims=(None, None, None, 0)), in_dims=(None, None, 0, None))


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    dev = query.device
    ft = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    rep = H // Hkv if enable_gqa else 1
    smod = _vmap_tile(score_mod, True) if score_mod is not None else None
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        mmod = _vmap_tile(block_mask.mask_mod, False)
    else:
        QB, KB = L, S
    out = torch.zeros(B, H, L, value.shape[-1], dtype=ft, device=dev)
    lse = torch.full((B, H, L), -math.inf, dtype=ft, device=dev)
    for b in range(B):
        for h in range(H):
            tb, th = torch.tensor(b), torch.tensor(h)
            for qblk in range((L + QB - 1) // QB):
                r0, r1 = qblk * QB, min(L, qblk * QB + QB)
                rows = torch.arange(r0, r1, device=dev)
                if block_mask is None:
                    blocks = [0]
                else:
                    nb = block_mask.kv_num_blocks
                    bi, hi = min(b, nb.shape[0] - 1), min(h, nb.shape[1] - 1)
                    blocks = block_mask.kv_indices[bi, hi, qblk, :int(nb[bi, hi, qblk])].tolist()
                qt = query[b, h, r0:r1].to(ft)
                m = torch.full((r1 - r0, 1), -math.inf, dtype=ft, device=dev)
                l_sum = torch.zeros((r1 - r0, 1), dtype=ft, device=dev)
                acc = torch.zeros((r1 - r0, value.shape[-1]), dtype=ft, device=dev)
                for kblk in blocks:
                    c0, c1 = kblk * KB, min(S, kblk * KB + KB)
                    cols = torch.arange(c0, c1, device=dev)
                    s = qt @ key[b, h // rep, c0:c1].to(ft).t() * scale
                    if smod is not None:
                        s = smod(s, tb, th, rows, cols).to(ft)
                    if block_mask is not None:
                        s = s.masked_fill(~mmod(tb, th, rows, cols), -math.inf)
                    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                    m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                    alpha = torch.exp(m - m_ref)
                    p = torch.exp(s - m_ref)
                    l_sum = l_sum * alpha + p.sum(-1, keepdim=True)
                    acc = acc * alpha + p @ value[b, h // rep, c0:c1].to(ft)
                    m = m_new
                out[b, h, r0:r1] = acc / torch.where(l_sum > 0, l_sum, torch.ones_like(l_sum))
                lse[b, h, r0:r1] = (torch.where(torch.isinf(m), torch.zeros_like(m), m) + torch.log(l_sum)).squeeze(-1)
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
