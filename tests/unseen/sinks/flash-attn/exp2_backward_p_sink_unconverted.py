"""flash_attn_func with a learnable sink, Triton-tutorial style with a hand-written backward: forward and backward
work in base 2 (scores times sm_scale * log2(e), exp2, lse kept as log2), converting the sink with log2(e) too.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["the backward recomputes the sink's probability as exp2(sink - lse2) without multiplying the sink by "
             "log2(e), so dsink is wrong (out, lse, dq, dk and dv are right)"],
    "kind": "semantic",
}

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
BLOCK_N = 32


def _qk2(q, k, n0, n1, sm_scale, softcap, slopes, left, right):
    """scores of keys n0:n1 in base-2 units, masked; also d(score2)/d(raw q·k) for the soft-cap chain rule."""
    L, S = q.shape[-2], k.shape[-2]
    raw = q @ k[..., n0:n1, :].transpose(-1, -2)
    if softcap > 0.0:
        t = torch.tanh(raw * sm_scale / softcap)
        s2 = softcap * t * LOG2E
        dcap = (1.0 - t * t) * sm_scale * LOG2E
    else:
        s2 = raw * (sm_scale * LOG2E)
        dcap = None
    m_idx = torch.arange(L, device=q.device)[:, None] + S - L
    n_idx = torch.arange(n0, n1, device=q.device)[None, :]
    if slopes is not None:
        s2 = s2 - slopes * LOG2E * (m_idx - n_idx).abs()
    hide = torch.zeros(L, n1 - n0, dtype=torch.bool, device=q.device)
    if left >= 0:
        hide |= n_idx < m_idx - left
    if right >= 0:
        hide |= n_idx > m_idx + right
    return s2.masked_fill(hide, float("-inf")), dcap


class _Attn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sink, sm_scale, softcap, slopes, left, right):
        Z, H, L, _ = q.shape
        S = k.shape[-2]
        if sink is not None:
            m_i = (sink * LOG2E).view(1, H, 1).expand(Z, H, L).clone()
            l_i = torch.ones(Z, H, L, dtype=q.dtype, device=q.device)
        else:
            m_i = torch.full((Z, H, L), float("-inf"), dtype=q.dtype, device=q.device)
            l_i = torch.zeros(Z, H, L, dtype=q.dtype, device=q.device)
        acc = torch.zeros(Z, H, L, v.shape[-1], dtype=q.dtype, device=q.device)
        for n0 in range(0, S, BLOCK_N):
            n1 = min(S, n0 + BLOCK_N)
            s2, _ = _qk2(q, k, n0, n1, sm_scale, softcap, slopes, left, right)
            m_ij = torch.maximum(m_i, s2.amax(-1))
            m_ok = torch.where(torch.isneginf(m_ij), torch.zeros_like(m_ij), m_ij)
            alpha = torch.exp2(m_i - m_ok)
            p = torch.exp2(s2 - m_ok.unsqueeze(-1))
            l_i = l_i * alpha + p.sum(-1)
            acc = acc * alpha.unsqueeze(-1) + p @ v[..., n0:n1, :]
            m_i = m_ij
        o = acc / torch.where(l_i == 0, torch.ones_like(l_i), l_i).unsqueeze(-1)
        lse2 = m_i + torch.log2(l_i)
        ctx.save_for_backward(q, k, v, sink, slopes, o, lse2)
        ctx.cfg = (sm_scale, softcap, left, right)
        return o, lse2 * LN2

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, sink, slopes, o, lse2 = ctx.saved_tensors
        sm_scale, softcap, left, right = ctx.cfg
        S = k.shape[-2]
        if dlse is None:
            dlse = torch.zeros_like(lse2)
        dlse = torch.where(torch.isfinite(lse2), dlse, torch.zeros_like(dlse))
        lse2_b = torch.where(torch.isneginf(lse2), torch.full_like(lse2, float("inf")), lse2)
        delta = (o * do).sum(-1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for n0 in range(0, S, BLOCK_N):
            n1 = min(S, n0 + BLOCK_N)
            s2, dcap = _qk2(q, k, n0, n1, sm_scale, softcap, slopes, left, right)
            p = torch.exp2(s2 - lse2_b.unsqueeze(-1))
            dv[..., n0:n1, :] += p.transpose(-1, -2) @ do
            dp = do @ v[..., n0:n1, :].transpose(-1, -2)
            ds = p * (dp - delta.unsqueeze(-1) + dlse.unsqueeze(-1))
            ds = ds * dcap / LOG2E if dcap is not None else ds * sm_scale
            dq += ds @ k[..., n0:n1, :]
            dk[..., n0:n1, :] += ds.transpose(-1, -2) @ q
        dsink = None
        if sink is not None:
            p_sink = torch.exp2(sink.view(1, -1, 1) - lse2_b)
            dsink = (p_sink * (dlse - delta)).sum(dim=(0, 2))
        return dq, dk, dv, dsink, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    Hkv = k.shape[2]
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    q_ = q.to(cdt).transpose(1, 2)
    k_ = k.to(cdt).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    v_ = v.to(cdt).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(cdt).reshape(-1, H, 1, 1)
    sink = learnable_sink.to(cdt) if learnable_sink is not None else None
    out, lse = _Attn.apply(q_, k_, v_, sink, sm_scale, softcap, slopes, left, right)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
