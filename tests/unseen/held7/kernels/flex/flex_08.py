import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "Full blocks are ignored: only kv_num_blocks/kv_indices (partial blocks, gated by mask_mod) are turned into the visibility mask; full_kv_num_blocks/full_kv_indices are never added, so keys in full blocks are hidden. Wrong whenever the BlockMask has full blocks (causal, windows, prefix, documents...)."
    ],
    "kind": "semantic"
}



def _blocks_to_dense(counts, indices, L, S, qbs, kbs):
    """(Bm, Hm, nq) counts + (Bm, Hm, nq, nk) indices -> (Bm, Hm, L, S) bool of the listed key blocks."""
    nk_total = (S + kbs - 1) // kbs
    slots = torch.arange(indices.shape[-1])
    listed = (slots < counts[..., None]).int()
    hit = torch.zeros(*indices.shape[:-1], max(nk_total, indices.shape[-1]), dtype=torch.int32)
    hit.scatter_add_(-1, indices.long(), listed)
    hit = hit[..., :nk_total] > 0
    return hit.repeat_interleave(qbs, -2)[..., :L, :].repeat_interleave(kbs, -1)[..., :S]


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    ft = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(ft), key.to(ft), value.to(ft)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, 1)
        v = v.repeat_interleave(H // Hkv, 1)

    bi = torch.arange(B).view(B, 1, 1, 1)
    hi = torch.arange(H).view(1, H, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    ki = torch.arange(S).view(1, 1, 1, S)

    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if score_mod is not None:
        s = score_mod(s, bi, hi, qi, ki).to(ft).expand(B, H, L, S)

    if block_mask is not None:
        qbs, kbs = block_mask.BLOCK_SIZE
        visible = _blocks_to_dense(block_mask.kv_num_blocks, block_mask.kv_indices, L, S, qbs, kbs)
        visible = visible & block_mask.mask_mod(bi, hi, qi, ki)
        s = s.masked_fill(~visible, float('-inf'))

    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - lse.nan_to_num(0.0, posinf=0.0, neginf=0.0))
    out = torch.matmul(p, v).to(query.dtype)
    if return_lse:
        return out, lse.squeeze(-1)
    return out
