"""Dense FlexAttention reference: raw QK^T, score_mod, scale, block-mask-derived key mask, float32 softmax."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod is applied to the raw q.k before the scale (s = score_mod(q.k) * scale) instead of to the "
        "scaled score, so any score_mod that adds a bias or soft-caps gives wrong outputs"
    ],
    "kind": "semantic",
}


def _grid(fn, *sizes, score=None):
    idx = [torch.arange(n) for n in sizes]
    lead = 0 if score is not None else None
    dims = [None, None, None, None]
    for axis in (3, 2, 1, 0):
        d = list(dims)
        d[axis] = 0
        fn = torch.vmap(fn, in_dims=((lead,) if score is not None else ()) + tuple(d))
    return fn(*(([score] if score is not None else []) + idx))


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    sm_scale = 1.0 / math.sqrt(E) if scale is None else scale
    kx, vx = key.to(ct), value.to(ct)
    if enable_gqa and Hkv != H:
        kx = kx.repeat_interleave(H // Hkv, dim=1)
        vx = vx.repeat_interleave(H // Hkv, dim=1)
    s = torch.matmul(query.to(ct), kx.transpose(-2, -1))
    if score_mod is not None:
        s = _grid(score_mod, B, H, L, S, score=s).to(ct)
    s = s * sm_scale
    if block_mask is not None:
        keep = block_mask.to_dense().to(torch.bool)        # (mB, mH, nQ, nK) block map
        q_bs, kv_bs = block_mask.BLOCK_SIZE
        keep = keep.repeat_interleave(q_bs, 2)[:, :, :L].repeat_interleave(kv_bs, 3)[:, :, :, :S]
        keep = keep & _grid(block_mask.mask_mod, B, H, L, S).to(torch.bool)
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.nan_to_num(neginf=0.0).unsqueeze(-1))
    out = torch.matmul(p, vx).to(query.dtype)
    return (out, lse) if return_lse else out
