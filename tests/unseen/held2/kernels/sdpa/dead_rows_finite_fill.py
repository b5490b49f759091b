"""Dense SDPA: masked positions filled before torch.softmax, everything computed in float32/float64."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "masked scores are filled with the finite dtype minimum instead of -inf, so a row whose boolean mask is "
        "all False gets a uniform average of V instead of the zero output sdpa returns for rows that see no key"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError
    orig = query.dtype
    ft = torch.float64 if orig == torch.float64 else torch.float32
    q, k, v = (t.to(ft) for t in (query, key, value))
    L, E = q.shape[-2:]
    S = k.shape[-2]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    if enable_gqa and q.dim() >= 3 and k.shape[-3] != q.shape[-3]:
        n_rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(n_rep, dim=-3)
        v = v.repeat_interleave(n_rep, dim=-3)

    attn = torch.einsum("...ld,...sd->...ls", q, k) * scale
    neg = torch.finfo(ft).min
    if is_causal:
        rows = torch.arange(L, device=q.device).view(L, 1)
        cols = torch.arange(S, device=q.device).view(1, S)
        attn = attn.masked_fill(cols > rows, neg)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn = attn.masked_fill(attn_mask.logical_not(), neg)
        else:
            attn = attn + attn_mask.to(ft)
    probs = torch.softmax(attn, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)
    out = torch.einsum("...ls,...sd->...ld", probs, v)
    return out.to(orig)
