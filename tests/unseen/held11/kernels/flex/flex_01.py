TRUTH = {'api': 'flex', 'bugs': ['the dense block lookup uses BLOCK_SIZE[-1] (the KV block size) for the query rows as well; when the BlockMask has different Q and KV block sizes each query row reads the block list of the wrong query block, hiding allowed keys / exposing full blocks (causal_bs32_64 with BLOCK_SIZE=(32, 64)); square block sizes are unaffected'], 'kind': 'semantic'}
import math

import torch


def _block_visibility(bm, L, S):
    """Per (b, h, q, k): 0 = hidden, 1 = partial (ask mask_mod), 2 = full."""
    blk = bm.BLOCK_SIZE[-1]
    nb, nh, nq = bm.kv_num_blocks.shape
    n_kv = bm.kv_indices.shape[-1]
    state = torch.zeros(nb, nh, nq, n_kv, dtype=torch.uint8)
    slot = torch.arange(n_kv)
    listed = slot < bm.kv_num_blocks.unsqueeze(-1)
    state.scatter_(-1, bm.kv_indices.long(), listed.to(torch.uint8))
    if bm.full_kv_num_blocks is not None:
        full = (slot < bm.full_kv_num_blocks.unsqueeze(-1)).to(torch.uint8) * 2
        full_state = torch.zeros_like(state).scatter_(-1, bm.full_kv_indices.long(), full)
        state = torch.maximum(state, full_state)
    q_blk = torch.arange(L) // blk
    k_blk = torch.arange(S) // blk
    return state[:, :, q_blk][..., k_blk]


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[3]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    q = query.to(ct)
    k = key.to(ct)
    v = value.to(ct)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)

    b_idx = torch.arange(B).view(B, 1, 1, 1)
    h_idx = torch.arange(H).view(1, H, 1, 1)
    q_idx = torch.arange(L).view(1, 1, L, 1)
    k_idx = torch.arange(S).view(1, 1, 1, S)

    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if score_mod is not None:
        scores = score_mod(scores, b_idx, h_idx, q_idx, k_idx).to(ct)
    if block_mask is not None:
        vis = _block_visibility(block_mask, L, S).expand(B, H, L, S)
        inner = torch.as_tensor(block_mask.mask_mod(b_idx, h_idx, q_idx, k_idx)).expand(B, H, L, S)
        allowed = (vis == 2) | ((vis == 1) & inner)
        scores = scores.masked_fill(~allowed, float('-inf'))

    lse = torch.logsumexp(scores, dim=-1)
    lse_ = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    out = torch.matmul(torch.exp(scores - lse_.unsqueeze(-1)), v).to(query.dtype)
    if return_lse:
        return out, lse
    return out
