"""flash_attn_func with a learnable sink: autograd.Function with a key-blocked forward seeded by the sink and a
FlashAttention-2 backward (dS = P * (dP - D), dsink = -sum(p_sink * D)).
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "(B, H) alibi_slopes are flattened and only the first H values are used, so every batch element gets batch "
        "0's slopes",
        "the backward leaves out the soft-cap's chain-rule factor (1 - tanh^2), so with softcap > 0 dq and dk are "
        "wrong",
    ],
    "kind": "two",
}

BLOCK_N = 16


def _block(q, k, n0, n1, scale, softcap, slopes, left, right):
    L, S = q.shape[-2], k.shape[-2]
    s = q @ k[..., n0:n1, :].transpose(-1, -2) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L, device=q.device).view(-1, 1) + S - L
    j = torch.arange(n0, n1, device=q.device).view(1, -1)
    if slopes is not None:
        s = s - slopes * (i - j).abs()
    ok = torch.ones(L, n1 - n0, dtype=torch.bool, device=q.device)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return s.masked_fill(~ok, float("-inf"))


class _Attn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sink, scale, softcap, slopes, left, right):
        B, H, L, _ = q.shape
        S = k.shape[-2]
        m = sink.view(1, H, 1).expand(B, H, L).clone()
        l_sum = torch.ones_like(m)
        acc = torch.zeros(B, H, L, v.shape[-1], dtype=q.dtype, device=q.device)
        for n0 in range(0, S, BLOCK_N):
            n1 = min(S, n0 + BLOCK_N)
            s = _block(q, k, n0, n1, scale, softcap, slopes, left, right)
            m_new = torch.maximum(m, s.amax(-1))
            r = torch.exp(m - m_new)
            p = torch.exp(s - m_new.unsqueeze(-1))
            l_sum = l_sum * r + p.sum(-1)
            acc = acc * r.unsqueeze(-1) + p @ v[..., n0:n1, :]
            m = m_new
        out = acc / l_sum.unsqueeze(-1)
        lse = m + torch.log(l_sum)
        ctx.save_for_backward(q, k, v, sink, slopes, out, lse)
        ctx.cfg = (scale, softcap, left, right)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, sink, slopes, out, lse = ctx.saved_tensors
        scale, softcap, left, right = ctx.cfg
        S = k.shape[-2]
        if dlse is None:
            dlse = torch.zeros_like(lse)
        dlse = torch.where(torch.isfinite(lse), dlse, torch.zeros_like(dlse))
        delta = (dout * out).sum(-1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for n0 in range(0, S, BLOCK_N):
            n1 = min(S, n0 + BLOCK_N)
            s = _block(q, k, n0, n1, scale, softcap, slopes, left, right)
            p = torch.exp(s - lse.unsqueeze(-1))
            dv[..., n0:n1, :] += p.transpose(-1, -2) @ dout
            ds = p * (dout @ v[..., n0:n1, :].transpose(-1, -2) - delta.unsqueeze(-1) + dlse.unsqueeze(-1))
            dq += ds @ k[..., n0:n1, :] * scale
            dk[..., n0:n1, :] += ds.transpose(-1, -2) @ q * scale
        p_sink = torch.exp(sink.view(1, -1, 1) - lse)
        dsink = (p_sink * (dlse - delta)).sum(dim=(0, 2))
        return dq, dk, dv, dsink, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    Hkv = k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    qt = q.to(cdt).transpose(1, 2)
    kt = k.to(cdt).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    vt = v.to(cdt).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(cdt).flatten()[:H].view(1, H, 1, 1)
    if learnable_sink is not None:
        sink = learnable_sink.to(cdt)
    else:
        sink = torch.full((H,), torch.finfo(cdt).min, dtype=cdt, device=q.device)
    out, lse = _Attn.apply(qt, kt, vt, sink, scale, softcap, slopes, left, right)
    if learnable_sink is None:
        lse = torch.where(lse <= torch.finfo(cdt).min / 2, torch.full_like(lse, float("-inf")), lse)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
