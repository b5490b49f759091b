"""SDPA evaluated one query tile at a time with plain differentiable ops (bias and boolean masks supported)."""
import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "a float attn_mask is added to the raw q.k^T before multiplying by the softmax scale, so the additive mask is "
        "multiplied by scale too; SDPA adds the float mask to the already-scaled scores",
    ],
    "kind": "semantic",
}

_Q_TILE = 32


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    io_dtype = query.dtype
    wd = torch.float64 if io_dtype == torch.float64 else torch.float32
    q, k, v = query.to(wd), key.to(wd), value.to(wd)
    if enable_gqa and k.size(-3) != q.size(-3):
        g = q.size(-3) // k.size(-3)
        k = k.repeat_interleave(g, dim=-3)
        v = v.repeat_interleave(g, dim=-3)
    L, S = q.size(-2), k.size(-2)
    sm_scale = (1.0 / math.sqrt(q.size(-1))) if scale is None else scale
    kt = k.transpose(-1, -2)
    col = torch.arange(S, device=q.device)

    pieces = []
    for i0 in range(0, L, _Q_TILE):
        i1 = min(L, i0 + _Q_TILE)
        raw = torch.matmul(q[..., i0:i1, :], kt)
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            m = attn_mask.to(wd)
            if m.size(-2) != 1:
                m = m[..., i0:i1, :]
            raw = raw + m
        s = raw * sm_scale
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            keep = attn_mask if attn_mask.size(-2) == 1 else attn_mask[..., i0:i1, :]
            s = s.masked_fill(~keep, float("-inf"))
        if is_causal:
            row = torch.arange(i0, i1, device=q.device).unsqueeze(-1)
            s = s.masked_fill(col.unsqueeze(0) > row, float("-inf"))
        mx = s.amax(dim=-1, keepdim=True).detach()
        mx = mx.masked_fill(~torch.isfinite(mx), 0.0)
        p = torch.exp(s - mx)
        den = p.sum(dim=-1, keepdim=True)
        p = p / torch.where(den > 0, den, torch.ones_like(den))
        pieces.append(torch.matmul(p, v))
    return torch.cat(pieces, dim=-2).to(io_dtype)
