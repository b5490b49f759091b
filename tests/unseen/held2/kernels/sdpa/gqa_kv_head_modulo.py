"""SDPA written as a loop over query heads, each head a dense float32 softmax against its key/value head."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "with enable_gqa, query head h reads key/value head h % Hkv (heads interleaved); "
        "it should read head h // (Hq // Hkv) so each group of consecutive query heads shares one kv head"
    ],
    "kind": "semantic",
}


def _one_head(q, k, v, keep, bias, scale):
    s = (q @ k.transpose(-2, -1)) * scale
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    mx = s.amax(dim=-1, keepdim=True).detach()
    mx = torch.nan_to_num(mx, neginf=0.0)
    p = torch.exp(s - mx)
    den = p.sum(dim=-1, keepdim=True)
    return (p @ v) / torch.where(den == 0, torch.ones_like(den), den)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout not supported")
    dt = query.dtype
    wt = torch.float64 if dt == torch.float64 else torch.float32
    q, k, v = query.to(wt), key.to(wt), value.to(wt)
    L, E, S = q.shape[-2], q.shape[-1], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(E)

    keep = None
    bias = None
    if is_causal:
        keep = torch.arange(S, device=q.device)[None, :] <= torch.arange(L, device=q.device)[:, None]
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            bias = attn_mask.to(wt)

    if q.dim() < 3:
        return _one_head(q, k, v, keep, bias, scale).to(dt)

    hq, hkv = q.shape[-3], k.shape[-3]
    full_shape = torch.broadcast_shapes(q.shape[:-3] + (hq, L, S), k.shape[:-3] + (hq, L, S))
    if keep is not None:
        keep = keep.expand(full_shape)
    if bias is not None:
        bias = bias.expand(full_shape)
    outs = []
    for h in range(hq):
        kh = h % hkv if (enable_gqa and hkv != hq) else h
        o = _one_head(
            q[..., h, :, :],
            k[..., kh, :, :],
            v[..., kh, :, :],
            None if keep is None else keep[..., h, :, :],
            None if bias is None else bias[..., h, :, :],
            scale,
        )
        outs.append(o)
    return torch.stack(outs, dim=-3).to(dt)
