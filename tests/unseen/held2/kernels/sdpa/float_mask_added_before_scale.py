"""Tiled SDPA with an online (running max / running sum) softmax over key tiles, all statistics in float32."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "a float attn_mask is added to the raw q.k products before multiplying by scale, so the bias gets scaled "
        "too; sdpa adds the float mask to the already scaled scores"
    ],
    "kind": "semantic",
}

BLOCK_M = 32
BLOCK_N = 48


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p > 0")
    dtype = query.dtype
    acc_t = torch.float64 if dtype == torch.float64 else torch.float32
    q = query.to(acc_t)
    k = key.to(acc_t)
    v = value.to(acc_t)
    L, E = q.shape[-2], q.shape[-1]
    S, Ev = k.shape[-2], v.shape[-1]
    softmax_scale = scale if scale is not None else 1.0 / math.sqrt(E)
    if enable_gqa and q.dim() >= 3:
        r = q.shape[-3] // k.shape[-3]
        if r > 1:
            k = k.repeat_interleave(r, dim=-3)
            v = v.repeat_interleave(r, dim=-3)

    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    q = q.expand(*batch, L, E)
    k = k.expand(*batch, S, E)
    v = v.expand(*batch, S, Ev)
    bool_mask = None
    float_mask = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bool_mask = attn_mask.expand(*batch, L, S)
        else:
            float_mask = attn_mask.to(acc_t).expand(*batch, L, S)

    rows = []
    for i0 in range(0, L, BLOCK_M):
        i1 = min(i0 + BLOCK_M, L)
        qi = q[..., i0:i1, :]
        m_i = torch.full((*batch, i1 - i0, 1), float("-inf"), dtype=acc_t, device=q.device)
        l_i = torch.zeros((*batch, i1 - i0, 1), dtype=acc_t, device=q.device)
        acc = torch.zeros((*batch, i1 - i0, Ev), dtype=acc_t, device=q.device)
        q_pos = torch.arange(i0, i1, device=q.device).unsqueeze(-1)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            if is_causal and j0 > i1 - 1:
                break
            s = qi @ k[..., j0:j1, :].transpose(-2, -1)
            if float_mask is not None:
                s = s + float_mask[..., i0:i1, j0:j1]
            s = s * softmax_scale
            if is_causal:
                k_pos = torch.arange(j0, j1, device=q.device).unsqueeze(0)
                s = s.masked_fill(k_pos > q_pos, float("-inf"))
            if bool_mask is not None:
                s = s.masked_fill(~bool_mask[..., i0:i1, j0:j1], float("-inf"))
            m_new = torch.maximum(m_i, s.amax(dim=-1, keepdim=True)).detach()
            m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m_i - m_use)
            p = torch.exp(s - m_use)
            l_i = l_i * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + p @ v[..., j0:j1, :]
            m_i = m_new
        rows.append(acc / torch.where(l_i > 0, l_i, torch.ones_like(l_i)))
    return torch.cat(rows, dim=-2).to(dtype)
