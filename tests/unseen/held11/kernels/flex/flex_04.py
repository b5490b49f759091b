TRUTH = {'api': 'flex', 'bugs': ['score_mod is applied to the raw q.k product and the softmax scale is multiplied in afterwards (score_mod(qk) * scale) instead of score_mod(scale * qk); every score_mod that is not linear-homogeneous in the score, or that adds a bias, gives wrong scores (relbias_scoremod, alibi_causal, captured_bias, tanhcap_scale, batch_scoremod_gqa)'], 'kind': 'semantic'}
import math

import torch

ROWS = 64


def _expand_blocks(indices, counts, n_kv_blocks):
    sel = torch.arange(indices.shape[-1]) < counts.unsqueeze(-1).long()
    dense = torch.zeros(indices.shape[:-1] + (n_kv_blocks,), dtype=torch.bool)
    return dense.scatter_(-1, indices.long(), sel)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    if scale is None:
        scale = E ** -0.5
    acc_dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    q = query.to(acc_dtype)
    k = key.to(acc_dtype)
    v = value.to(acc_dtype)
    if enable_gqa:
        k = k.repeat_interleave(H // Hkv, 1)
        v = v.repeat_interleave(H // Hkv, 1)

    bi = torch.arange(B).view(-1, 1, 1, 1)
    hi = torch.arange(H).view(1, -1, 1, 1)
    kj = torch.arange(S).view(1, 1, 1, -1)
    part = full = None
    if block_mask is not None:
        qbs, kbs = block_mask.BLOCK_SIZE
        nkb = block_mask.kv_indices.shape[-1]
        part = _expand_blocks(block_mask.kv_indices, block_mask.kv_num_blocks, nkb)
        if block_mask.full_kv_num_blocks is not None:
            full = _expand_blocks(block_mask.full_kv_indices, block_mask.full_kv_num_blocks, nkb)
        kcol = torch.arange(S) // kbs

    outs, lses = [], []
    for r0 in range(0, L, ROWS):
        r1 = min(r0 + ROWS, L)
        qi = torch.arange(r0, r1).view(1, 1, -1, 1)
        s = torch.matmul(q[:, :, r0:r1], k.transpose(-1, -2))
        if score_mod is not None:
            s = score_mod(s, bi, hi, qi, kj).to(acc_dtype)
        s = s * scale
        if block_mask is not None:
            qrow = torch.arange(r0, r1) // qbs
            allowed = part[:, :, qrow][..., kcol] & block_mask.mask_mod(bi, hi, qi, kj)
            if full is not None:
                allowed = allowed | full[:, :, qrow][..., kcol]
            s = s.masked_fill(~allowed, float('-inf'))
        mx = s.amax(-1, keepdim=True)
        mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
        ex = torch.exp(s - mx)
        den = ex.sum(-1, keepdim=True)
        outs.append(torch.matmul(ex, v) / torch.where(den > 0, den, torch.ones_like(den)))
        lses.append((mx + torch.log(den)).squeeze(-1))
    out = torch.cat(outs, 2).to(query.dtype)
    lse = torch.cat(lses, 2)
    if return_lse:
        return out, lse
    return out
