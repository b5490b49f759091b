"""flash_attn_func with a learnable sink: key-tiled online softmax seeded with the sink, recomputing backward.

Forward: m starts at the sink logit and l at 1, so the softmax_lse it saves and returns includes the sink. Backward:
P = exp(s - lse) per tile, dS = P * (dP - D + dlse), soft-cap chain rule, dsink = sum(p_sink * (dlse - D)).
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [],
    "kind": "correct",
}

BLOCK_N = 32


def _scores(q, k, j0, j1, scale, softcap, slopes, left, right, S):
    """scores of all queries against keys j0:j1; returns (s, tanh) with tanh None without soft-cap."""
    L = q.shape[-2]
    raw = torch.matmul(q, k[..., j0:j1, :].transpose(-2, -1)) * scale
    t = None
    if softcap > 0.0:
        t = torch.tanh(raw / softcap)
        s = softcap * t
    else:
        s = raw
    i = torch.arange(L, device=q.device).view(-1, 1)
    j = torch.arange(j0, j1, device=q.device).view(1, -1)
    diag = i + S - L
    if slopes is not None:
        s = s - slopes * (diag - j).abs().to(s.dtype)
    visible = torch.ones(L, j1 - j0, dtype=torch.bool, device=q.device)
    if left >= 0:
        visible &= j >= diag - left
    if right >= 0:
        visible &= j <= diag + right
    s = s.masked_fill(~visible, float("-inf"))
    return s, t


class _FlashSink(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sink, scale, softcap, slopes, left, right):
        B, H, L, _ = q.shape
        S = k.shape[-2]
        if sink is not None:
            m = sink.view(1, H, 1).expand(B, H, L).clone()
            l_sum = torch.ones(B, H, L, dtype=q.dtype, device=q.device)
        else:
            m = torch.full((B, H, L), float("-inf"), dtype=q.dtype, device=q.device)
            l_sum = torch.zeros(B, H, L, dtype=q.dtype, device=q.device)
        acc = torch.zeros(B, H, L, v.shape[-1], dtype=q.dtype, device=q.device)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            s, _ = _scores(q, k, j0, j1, scale, softcap, slopes, left, right, S)
            m_new = torch.maximum(m, s.amax(dim=-1))
            m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_use)
            p = torch.exp(s - m_use.unsqueeze(-1))
            l_sum = l_sum * alpha + p.sum(dim=-1)
            acc = acc * alpha.unsqueeze(-1) + torch.matmul(p, v[..., j0:j1, :])
            m = m_new
        out = acc / torch.where(l_sum == 0, torch.ones_like(l_sum), l_sum).unsqueeze(-1)
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
        lse_b = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)
        delta = (dout * out).sum(dim=-1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            s, t = _scores(q, k, j0, j1, scale, softcap, slopes, left, right, S)
            p = torch.exp(s - lse_b.unsqueeze(-1))
            dv[..., j0:j1, :] += torch.matmul(p.transpose(-2, -1), dout)
            dp = torch.matmul(dout, v[..., j0:j1, :].transpose(-2, -1))
            ds = p * (dp - delta.unsqueeze(-1) + dlse.unsqueeze(-1))
            if t is not None:
                ds = ds * (1.0 - t * t)
            dq += torch.matmul(ds, k[..., j0:j1, :]) * scale
            dk[..., j0:j1, :] += torch.matmul(ds.transpose(-2, -1), q) * scale
        dsink = None
        if sink is not None:
            p_sink = torch.exp(sink.view(1, -1, 1) - lse_b)
            dsink = (p_sink * (dlse - delta)).sum(dim=(0, 2))
        return dq, dk, dv, dsink, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
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
        slopes = alibi_slopes.to(cdt)
        slopes = slopes.view(1, H, 1, 1) if slopes.dim() == 1 else slopes.view(B, H, 1, 1)
    sink = learnable_sink.to(cdt) if learnable_sink is not None else None
    out, lse = _FlashSink.apply(qt, kt, vt, sink, scale, softcap, slopes, left, right)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
