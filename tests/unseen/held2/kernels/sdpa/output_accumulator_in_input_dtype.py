"""Tiled SDPA (query tiles x key tiles) with online softmax; P is cast to V's dtype for the P @ V product."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the running output accumulator is allocated and updated in the input dtype (bfloat16 for bfloat16 "
        "inputs), so every rescale-and-add across key tiles rounds it; it should be kept in float32 and only "
        "the final normalized output cast back (measured, bf16 B=1 H=4 L=S=1024 D=64 non-causal, max abs error vs a "
        "float64 reference: 4.06e-3 vs 7.34e-4 for the correct kernel, 5.5x; mean 2.82e-4 vs 5.68e-5)"
    ],
    "kind": "precision",
}

BLOCK_M = 64
BLOCK_N = 32


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p > 0")
    io_t = query.dtype
    st_t = torch.float64 if io_t == torch.float64 else torch.float32
    L, E = query.shape[-2], query.shape[-1]
    S, Ev = key.shape[-2], value.shape[-1]
    sm = scale if scale is not None else 1.0 / math.sqrt(E)
    k_in, v_in = key, value
    if enable_gqa and query.dim() >= 3 and query.shape[-3] != key.shape[-3]:
        r = query.shape[-3] // key.shape[-3]
        k_in = k_in.repeat_interleave(r, dim=-3)
        v_in = v_in.repeat_interleave(r, dim=-3)
    batch = torch.broadcast_shapes(query.shape[:-2], k_in.shape[:-2])
    q = query.expand(*batch, L, E).to(st_t)
    k = k_in.expand(*batch, S, E).to(st_t)
    v = v_in.expand(*batch, S, Ev)

    keep = None
    add = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask.expand(*batch, L, S)
        else:
            add = attn_mask.to(st_t).expand(*batch, L, S)

    blocks = []
    for i0 in range(0, L, BLOCK_M):
        i1 = min(L, i0 + BLOCK_M)
        rows = i1 - i0
        m_i = torch.full((*batch, rows, 1), float("-inf"), dtype=st_t, device=q.device)
        l_i = torch.zeros((*batch, rows, 1), dtype=st_t, device=q.device)
        o_i = torch.zeros((*batch, rows, Ev), dtype=io_t, device=q.device)
        qi = q[..., i0:i1, :]
        ii = torch.arange(i0, i1, device=q.device).view(-1, 1)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(S, j0 + BLOCK_N)
            if is_causal and j0 >= i1:
                break
            s = (qi @ k[..., j0:j1, :].transpose(-1, -2)) * sm
            if add is not None:
                s = s + add[..., i0:i1, j0:j1]
            if is_causal:
                jj = torch.arange(j0, j1, device=q.device).view(1, -1)
                s = s.masked_fill(jj > ii, float("-inf"))
            if keep is not None:
                s = s.masked_fill(~keep[..., i0:i1, j0:j1], float("-inf"))
            m_new = torch.maximum(m_i, s.amax(-1, keepdim=True)).detach()
            m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            alpha = torch.exp(m_i - m_safe)
            p = torch.exp(s - m_safe)
            l_i = l_i * alpha + p.sum(-1, keepdim=True)
            pv = (p.to(v.dtype) @ v[..., j0:j1, :]).to(io_t)
            o_i = o_i * alpha.to(io_t) + pv
            m_i = m_new
        blocks.append(o_i.to(st_t) / torch.where(l_i > 0, l_i, torch.ones_like(l_i)))
    return torch.cat(blocks, dim=-2).to(io_t)
