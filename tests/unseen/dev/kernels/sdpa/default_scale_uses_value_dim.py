"""Query-chunked SDPA: processes 32 query rows at a time to bound the size of the score matrix."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the default scale is computed from value's head dim (1/sqrt(Ev)) instead of query's (1/sqrt(E)), "
        "so softmax is too sharp or too flat whenever Ev != E and scale is None"
    ],
    "kind": "semantic",
}

CHUNK = 32


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p != 0.0:
        raise NotImplementedError("dropout")
    dt = query.dtype
    acc = torch.float64 if dt == torch.float64 else torch.float32
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    head_dim = v.shape[-1]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(g, dim=-3)
        v = v.repeat_interleave(g, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    mask = None
    if attn_mask is not None:
        lead = torch.broadcast_shapes(q.shape[:-2], attn_mask.shape[:-2])
        mask = torch.broadcast_to(attn_mask, (*lead, L, S))
    outs = []
    kt = k.transpose(-2, -1)
    cols = torch.arange(S, device=q.device)
    for r0 in range(0, L, CHUNK):
        r1 = min(L, r0 + CHUNK)
        s = torch.matmul(q[..., r0:r1, :], kt) * scale
        if is_causal:
            rows = torch.arange(r0, r1, device=q.device)
            s = s.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
        if mask is not None:
            mc = mask[..., r0:r1, :]
            s = s.masked_fill(~mc, float("-inf")) if mc.dtype == torch.bool else s + mc.to(acc)
        m = s.amax(-1, keepdim=True).detach()
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        denom = p.sum(-1, keepdim=True)
        p = p / torch.where(denom > 0, denom, torch.ones_like(denom))
        outs.append(torch.matmul(p, v))
    return torch.cat(outs, dim=-2).to(dt)
