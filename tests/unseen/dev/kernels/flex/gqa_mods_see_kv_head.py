"""GQA-native FlexAttention: loop over kv heads and process each kv head's whole query-head group as one batch of
rows, dense float32 math."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "with enable_gqa, score_mod and mask_mod are called with the kv head index (h // group) instead of the "
        "query head index h, so head-dependent biases and masks use the wrong head for every query head but the "
        "first of each group"
    ],
    "kind": "semantic",
}


def _grid4(fn, b, h, qi, kj, score=None):
    lead = () if score is None else (0,)
    for axis in (3, 2, 1, 0):
        dims = [None] * 4
        dims[axis] = 0
        fn = torch.vmap(fn, in_dims=lead + tuple(dims))
    args = (b, h, qi, kj) if score is None else (score, b, h, qi, kj)
    return fn(*args)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    f = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    group = H // Hkv if enable_gqa else 1
    n_kv = H // group
    ar_b, ar_q, ar_k = torch.arange(B), torch.arange(L), torch.arange(S)
    if block_mask is not None:
        qbs, kbs = block_mask.BLOCK_SIZE
        blocks = block_mask.to_dense().bool()
        blocks = blocks.repeat_interleave(qbs, 2)[:, :, :L].repeat_interleave(kbs, 3)[:, :, :, :S]
    outs, lses = [], []
    for hk in range(n_kv):
        heads = torch.full((group,), hk)           # the kv head all of its query heads share
        qg = query[:, hk * group:(hk + 1) * group].to(f)
        s = qg @ key[:, hk:hk + 1].to(f).transpose(-1, -2) * scale
        if score_mod is not None:
            s = _grid4(score_mod, ar_b, heads, ar_q, ar_k, score=s).to(f)
        if block_mask is not None:
            keep = _grid4(block_mask.mask_mod, ar_b, heads, ar_q, ar_k).bool()
            blk = blocks[:, hk * group:(hk + 1) * group] if blocks.shape[1] > 1 else blocks
            s = s.masked_fill(~(keep & blk), -math.inf)
        lse_g = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(lse_g), torch.zeros_like(lse_g), lse_g)[..., None])
        outs.append(p @ value[:, hk:hk + 1].to(f))
        lses.append(lse_g)
    out = torch.cat(outs, 1).to(query.dtype)
    lse = torch.cat(lses, 1)
    return (out, lse) if return_lse else out
