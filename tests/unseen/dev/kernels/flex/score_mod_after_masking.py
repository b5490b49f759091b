"""Dense FlexAttention: mask first (so score_mod only ever sees -inf where keys are hidden), then score_mod, then
a float32 softmax."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod is applied after the mask has set hidden scores to -inf, so a score_mod that maps -inf to a "
        "finite value (e.g. a tanh soft-cap) makes masked keys visible again"
    ],
    "kind": "semantic",
}


def _vmap4(fn, with_score):
    lead = (0,) if with_score else ()
    for pos in (3, 2, 1, 0):
        dims = [None] * 4
        dims[pos] = 0
        fn = torch.vmap(fn, in_dims=lead + tuple(dims))
    return fn


def _visible(block_mask, B, H, L, S):
    q_bs, kv_bs = block_mask.BLOCK_SIZE
    blocks = block_mask.to_dense().bool()
    blocks = blocks.repeat_interleave(q_bs, dim=2)[:, :, :L]
    blocks = blocks.repeat_interleave(kv_bs, dim=3)[:, :, :, :S]
    ar = [torch.arange(n) for n in (B, H, L, S)]
    return blocks & _vmap4(block_mask.mask_mod, False)(*ar).bool()


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    wt = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    k, v = key.to(wt), value.to(wt)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    s = query.to(wt) @ k.transpose(-2, -1) * scale
    if block_mask is not None:
        s = s.masked_fill(~_visible(block_mask, B, H, L, S), -math.inf)
    if score_mod is not None:
        ar = [torch.arange(n) for n in (B, H, L, S)]
        s = _vmap4(score_mod, True)(s, *ar).to(wt)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    out = (e @ v) / torch.where(z > 0, z, torch.ones_like(z))
    lse = torch.where(z > 0, m + torch.log(torch.where(z > 0, z, torch.ones_like(z))), torch.full_like(z, -math.inf))
    out = out.to(query.dtype)
    return (out, lse.squeeze(-1)) if return_lse else out
