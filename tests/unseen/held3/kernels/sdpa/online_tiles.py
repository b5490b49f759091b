"""Online-softmax SDPA over key tiles of 32 written with differentiable torch ops (autograd through the loop)."""
import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the running output accumulator and running row-sum are stored in a fixed bfloat16 buffer dtype and re-rounded "
        "to bfloat16 after every 32-key tile (for float32 inputs too), so the sums over ~L/32 tiles accumulate bfloat16 "
        "rounding error; they should be kept in float32 (float64 for float64 inputs) and rounded once at the end",
    ],
    "kind": "precision",
}

_TILE = 32
_BUF_DTYPE = torch.bfloat16


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    io = query.dtype
    f = torch.float64 if io == torch.float64 else torch.float32
    buf = f if io == torch.float64 else _BUF_DTYPE
    k, v = key, value
    if enable_gqa and k.size(-3) != query.size(-3):
        r = query.size(-3) // k.size(-3)
        k = k.repeat_interleave(r, dim=-3)
        v = v.repeat_interleave(r, dim=-3)
    batch = torch.broadcast_shapes(query.shape[:-2], k.shape[:-2], v.shape[:-2])
    L, S = query.size(-2), k.size(-2)
    q = query.to(f).expand(*batch, L, query.size(-1))
    k = k.to(f).expand(*batch, S, k.size(-1))
    v = v.to(f).expand(*batch, S, v.size(-1))
    sm = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale

    keep = None
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            bias = attn_mask.to(f)

    m_i = torch.full((*batch, L), float("-inf"), dtype=f, device=q.device)
    l_i = torch.zeros((*batch, L), dtype=buf, device=q.device)
    o_i = torch.zeros((*batch, L, v.size(-1)), dtype=buf, device=q.device)
    for j0 in range(0, S, _TILE):
        j1 = min(S, j0 + _TILE)
        s = torch.matmul(q, k[..., j0:j1, :].transpose(-1, -2)) * sm
        if bias is not None:
            s = s + bias[..., j0:j1]
        if keep is not None:
            s = s.masked_fill(~keep[..., j0:j1], float("-inf"))
        m_new = torch.maximum(m_i, s.amax(dim=-1)).detach()
        m_ref = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        corr = torch.exp(m_i - m_ref)
        p = torch.exp(s - m_ref.unsqueeze(-1))
        l_i = (l_i.to(f) * corr + p.sum(dim=-1)).to(buf)
        o_i = (o_i.to(f) * corr.unsqueeze(-1) + torch.matmul(p, v[..., j0:j1, :])).to(buf)
        m_i = m_new
    l_f = l_i.to(f)
    out = o_i.to(f) / torch.where(l_f > 0, l_f, torch.ones_like(l_f)).unsqueeze(-1)
    return out.to(io)
