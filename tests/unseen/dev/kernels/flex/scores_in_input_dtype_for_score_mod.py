"""Dense FlexAttention port: QK^T and score_mod run in the caller's dtype (so score_mod sees tensors of the dtype
it was written for), softmax and PV in float32."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "the scaled scores are rounded to the input dtype before score_mod and masking and only upcast for the "
        "softmax, so for bfloat16/float16 every logit carries an 8/11-bit rounding error and the output error "
        "is several times PyTorch's when logits are large"
    ],
    "kind": "precision",
}


def _vm(fn, score):
    lead = (0,) if score else ()
    for axis in (3, 2, 1, 0):
        d = [None] * 4
        d[axis] = 0
        fn = torch.vmap(fn, in_dims=lead + tuple(d))
    return fn


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    k, v = key, value
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, 1)
        v = v.repeat_interleave(H // Hkv, 1)
    s = (query.to(acc) @ k.to(acc).transpose(-1, -2) * scale).to(query.dtype)
    idx = [torch.arange(n) for n in (B, H, L, S)]
    if score_mod is not None:
        s = _vm(score_mod, True)(s, *idx).to(query.dtype)
    s = s.to(acc)
    if block_mask is not None:
        qbs, kbs = block_mask.BLOCK_SIZE
        dense = block_mask.to_dense().bool()
        dense = dense.repeat_interleave(qbs, 2)[:, :, :L].repeat_interleave(kbs, 3)[:, :, :, :S]
        s = s.masked_fill(~(dense & _vm(block_mask.mask_mod, False)(*idx).bool()), -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    out = (p @ v.to(acc)).to(query.dtype)
    return (out, lse) if return_lse else out
