"""SDPA with attention sinks as a tiled online-softmax kernel with a hand-written FlashAttention-style backward.

The running max and sum start from the sink (m = sink, l = 1), so the sink is in the saved log-sum-exp; the backward
recomputes P = exp(s - lse) tile by tile and gives the sink its gradient dsink = -sum(exp(sink - lse) * D).
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [],
    "kind": "correct",
}

BLOCK_N = 16


def _tile_scores(q, k, j0, j1, scale, mask, causal):
    s = torch.matmul(q, k[..., j0:j1, :].transpose(-2, -1)) * scale
    if causal:
        rows = torch.arange(q.shape[-2], device=q.device).view(-1, 1)
        cols = torch.arange(j0, j1, device=q.device).view(1, -1)
        s = s.masked_fill(cols > rows, float("-inf"))
    if mask is not None:
        m = mask[..., j0:j1]
        s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m.to(s.dtype)
    return s


class _SinkAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, mask, causal, scale):
        N, H, L, _ = q.shape
        S = k.shape[-2]
        if sinks is not None:
            m = sinks.view(1, H, 1).expand(N, H, L).clone()
            l_sum = torch.ones(N, H, L, dtype=q.dtype, device=q.device)
        else:
            m = torch.full((N, H, L), float("-inf"), dtype=q.dtype, device=q.device)
            l_sum = torch.zeros(N, H, L, dtype=q.dtype, device=q.device)
        acc = torch.zeros(N, H, L, v.shape[-1], dtype=q.dtype, device=q.device)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            s = _tile_scores(q, k, j0, j1, scale, mask, causal)
            m_new = torch.maximum(m, s.amax(dim=-1))
            m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_safe)
            p = torch.exp(s - m_safe.unsqueeze(-1))
            l_sum = l_sum * alpha + p.sum(dim=-1)
            acc = acc * alpha.unsqueeze(-1) + torch.matmul(p, v[..., j0:j1, :])
            m = m_new
        l_safe = torch.where(l_sum == 0, torch.ones_like(l_sum), l_sum)
        out = acc / l_safe.unsqueeze(-1)
        lse = m + torch.log(l_sum)  # -inf for a row with neither keys nor sink
        ctx.save_for_backward(q, k, v, sinks, out, lse, mask)
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks, out, lse, mask = ctx.saved_tensors
        causal, scale = ctx.causal, ctx.scale
        S = k.shape[-2]
        lse_b = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse).unsqueeze(-1)
        delta = (dout * out).sum(dim=-1)
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            s = _tile_scores(q, k, j0, j1, scale, mask, causal)
            p = torch.exp(s - lse_b)
            dv[..., j0:j1, :] += torch.matmul(p.transpose(-2, -1), dout)
            dp = torch.matmul(dout, v[..., j0:j1, :].transpose(-2, -1))
            ds = p * (dp - delta.unsqueeze(-1))
            dq += torch.matmul(ds, k[..., j0:j1, :]) * scale
            dk[..., j0:j1, :] += torch.matmul(ds.transpose(-2, -1), q) * scale
        dsinks = None
        if sinks is not None:
            p_sink = torch.exp(sinks.view(1, -1, 1) - lse_b.squeeze(-1))
            dsinks = -(p_sink * delta).sum(dim=(0, 2))
        return dq, dk, dv, dsinks, None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported by this kernel")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    lead = query.shape[:-3]
    H, L, E = query.shape[-3:]
    Hkv, S = key.shape[-3], key.shape[-2]
    q = query.to(cdt).reshape(-1, H, L, E)
    k = key.to(cdt).reshape(-1, Hkv, S, E)
    v = value.to(cdt).reshape(-1, Hkv, S, value.shape[-1])
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    mask = None
    if attn_mask is not None:
        mask = attn_mask.expand(*lead, H, L, S).reshape(-1, H, L, S)
    s = sinks.to(cdt) if sinks is not None else None
    out = _SinkAttention.apply(q, k, v, s, mask, is_causal, scale)
    return out.reshape(*lead, H, L, value.shape[-1]).to(query.dtype)
