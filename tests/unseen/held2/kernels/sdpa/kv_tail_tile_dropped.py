"""Split-KV SDPA: scores folded into base 2 (scale * log2(e)), online max/sum over fixed-size key tiles, exp2."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the key loop runs over S // BLOCK_N whole tiles only, so the last S % BLOCK_N keys are never attended "
        "(and S < BLOCK_N gives an all-zero output); it must also process the final partial tile"
    ],
    "kind": "semantic",
}

LOG2E = 1.4426950408889634
BLOCK_N = 64


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not implemented")
    io_dtype = query.dtype
    f = torch.float64 if io_dtype == torch.float64 else torch.float32
    q, k, v = query.to(f), key.to(f), value.to(f)
    L, E = q.shape[-2], q.shape[-1]
    S = k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    qk_scale = scale * LOG2E
    if enable_gqa and q.dim() >= 3 and q.shape[-3] > k.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(g, -3)
        v = v.repeat_interleave(g, -3)

    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    mask2 = None
    keep = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask.expand(*lead, L, S)
        else:
            mask2 = (attn_mask.to(f) * LOG2E).expand(*lead, L, S)
    qpos = torch.arange(L, device=q.device)[:, None]

    m = torch.full((*lead, L, 1), float("-inf"), dtype=f, device=q.device)
    den = torch.zeros((*lead, L, 1), dtype=f, device=q.device)
    num = torch.zeros((*lead, L, v.shape[-1]), dtype=f, device=q.device)
    n_tiles = S // BLOCK_N
    for t in range(n_tiles):
        lo, hi = t * BLOCK_N, min((t + 1) * BLOCK_N, S)
        s2 = torch.matmul(q, k[..., lo:hi, :].transpose(-1, -2)) * qk_scale
        if mask2 is not None:
            s2 = s2 + mask2[..., lo:hi]
        if is_causal:
            kpos = torch.arange(lo, hi, device=q.device)[None, :]
            s2 = s2.masked_fill(kpos > qpos, float("-inf"))
        if keep is not None:
            s2 = s2.masked_fill(~keep[..., lo:hi], float("-inf"))
        m_new = torch.maximum(m, s2.amax(-1, keepdim=True)).detach()
        m_ref = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
        corr = torch.exp2(m - m_ref)
        p = torch.exp2(s2 - m_ref)
        den = den * corr + p.sum(-1, keepdim=True)
        num = num * corr + torch.matmul(p, v[..., lo:hi, :])
        m = m_new
    out = num / torch.where(den > 0, den, torch.ones_like(den))
    return out.to(io_dtype)
