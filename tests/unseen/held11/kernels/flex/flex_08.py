TRUTH = {'api': 'flex', 'bugs': ['all arithmetic is done on query.float() / key.float() / value.float(), i.e. in float32 even for float64 inputs, and only the output is cast back; every float64 case has ~1e-7 relative error in out and lse (float32/bfloat16 are fine)'], 'kind': 'precision'}
import math

import torch


def _materialize_mask(block_mask, B, H, L, S):
    q_bs, kv_bs = block_mask.BLOCK_SIZE
    num_kv = block_mask.kv_indices.shape[-1]
    ar = torch.arange(num_kv)
    blocks = torch.zeros(block_mask.kv_indices.shape, dtype=torch.bool)
    blocks.scatter_(-1, block_mask.kv_indices.long(), ar < block_mask.kv_num_blocks.long().unsqueeze(-1))
    full = torch.zeros_like(blocks)
    if block_mask.full_kv_indices is not None:
        full.scatter_(-1, block_mask.full_kv_indices.long(), ar < block_mask.full_kv_num_blocks.long().unsqueeze(-1))
    qsel = torch.arange(L) // q_bs
    ksel = torch.arange(S) // kv_bs
    blocks = blocks.index_select(2, qsel).index_select(3, ksel)
    full = full.index_select(2, qsel).index_select(3, ksel)
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(H).view(1, H, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    kj = torch.arange(S).view(1, 1, 1, S)
    return full | (blocks & block_mask.mask_mod(b, h, qi, kj))


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    q = query.float()
    k = key.float()
    v = value.float()
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)

    scores = (q @ k.transpose(-2, -1)) * scale
    if score_mod is not None:
        b = torch.arange(B).view(B, 1, 1, 1)
        h = torch.arange(H).view(1, H, 1, 1)
        qi = torch.arange(L).view(1, 1, L, 1)
        kj = torch.arange(S).view(1, 1, 1, S)
        scores = score_mod(scores, b, h, qi, kj).to(scores.dtype)
    if block_mask is not None:
        keep = _materialize_mask(block_mask, B, H, L, S)
        scores = scores.masked_fill(~keep, -float('inf'))

    lse = scores.logsumexp(dim=-1)
    probs = (scores - lse.masked_fill(lse.isneginf(), 0).unsqueeze(-1)).exp()
    out = (probs @ v).to(query.dtype)
    if return_lse:
        return out, lse
    return out
