"""Sinks bolted onto an existing FlashAttention-style SDPA: the forward runs the usual softmax over the keys, then
rescales the output by exp(lse_keys - lse) to give the sink its share; the backward is the usual recompute-from-lse.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["the forward saves the keys-only lse (without the sink) and the backward recomputes P = exp(s - lse) "
             "and p_sink = exp(sink - lse) from it, so with sinks dq, dk, dv and dsink are all wrong (the forward "
             "output is right)"],
    "kind": "semantic",
}

BLOCK = 16


class _Attn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, bias, scale):
        S = k.shape[-2]
        m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
        l_sum = torch.zeros_like(m)
        acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        for j0 in range(0, S, BLOCK):
            j1 = min(S, j0 + BLOCK)
            s = torch.matmul(q, k[..., j0:j1, :].transpose(-2, -1)) * scale + bias[..., j0:j1]
            m_new = torch.maximum(m, s.amax(-1))
            m_ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            corr = torch.exp(m - m_ref)
            p = torch.exp(s - m_ref.unsqueeze(-1))
            l_sum = l_sum * corr + p.sum(-1)
            acc = acc * corr.unsqueeze(-1) + torch.matmul(p, v[..., j0:j1, :])
            m = m_new
        lse = m + torch.log(l_sum)
        out = acc / torch.where(l_sum > 0, l_sum, torch.ones_like(l_sum)).unsqueeze(-1)
        if sinks is not None:
            lse_all = torch.logaddexp(lse, sinks.view(-1, 1).expand_as(lse))
            out = out * torch.exp(lse - lse_all).nan_to_num(0.0).unsqueeze(-1)
        ctx.save_for_backward(q, k, v, sinks, bias, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks, bias, out, lse = ctx.saved_tensors
        scale = ctx.scale
        S = k.shape[-2]
        lse_b = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)
        delta = (dout * out).sum(-1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for j0 in range(0, S, BLOCK):
            j1 = min(S, j0 + BLOCK)
            s = torch.matmul(q, k[..., j0:j1, :].transpose(-2, -1)) * scale + bias[..., j0:j1]
            p = torch.exp(s - lse_b.unsqueeze(-1))
            dv[..., j0:j1, :] = torch.matmul(p.transpose(-2, -1), dout)
            ds = p * (torch.matmul(dout, v[..., j0:j1, :].transpose(-2, -1)) - delta.unsqueeze(-1))
            dq = dq + torch.matmul(ds, k[..., j0:j1, :]) * scale
            dk[..., j0:j1, :] = torch.matmul(ds.transpose(-2, -1), q) * scale
        dsinks = None
        if sinks is not None:
            dsinks = -(torch.exp(sinks.view(-1, 1) - lse_b) * delta).sum(dim=(0, 2))
        return dq, dk, dv, dsinks, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    *lead, H, L, E = query.shape
    Hkv, S, Ev = key.shape[-3], key.shape[-2], value.shape[-1]
    q = query.to(cdt).reshape(-1, H, L, E)
    k = key.to(cdt).reshape(-1, Hkv, S, E)
    v = value.to(cdt).reshape(-1, Hkv, S, Ev)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, 1)
        v = v.repeat_interleave(H // Hkv, 1)
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    bias = torch.zeros(L, S, dtype=cdt, device=query.device)
    if is_causal:
        bias.masked_fill_(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        bias = bias.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else bias + attn_mask
    bias = bias.to(cdt).expand(*lead, H, L, S).reshape(-1, H, L, S)
    out = _Attn.apply(q, k, v, None if sinks is None else sinks.to(cdt), bias, scale)
    return out.reshape(*lead, H, L, Ev).to(query.dtype)
