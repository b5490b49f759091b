TRUTH = {'api': 'flash-attn', 'bugs': ['backward recomputes P = exp(s - lse) with the raw saved lse, which is -inf for query rows that see no key, producing NaN in dq/dk/dv (forward is fine); shows with causal and L > S (causal_L>S_mqa)', 'backward rebuilds the mask from `causal` only and ignores window_size, so dq/dk/dv are computed with keys outside the sliding window (forward is right); wrong on every windowed case (window32_16_gqa, window20_causal_L<S, window_-1_40, causal_window30_10, softcap_alibi_window)'], 'kind': 'two'}
import math

import torch


def _band(L, S, left, right):
    i = torch.arange(L).view(L, 1) + (S - L)
    j = torch.arange(S).view(1, S)
    keep = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    return keep, i, j


def _scores(q, k, scale, softcap, bias, keep):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    return s.masked_fill(~keep, float('-inf'))


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, window_size, softcap, bias, groups):
        L, S = q.shape[-2], k.shape[-2]
        left, right = window_size
        if causal:
            right = 0
        keep, _, _ = _band(L, S, left, right)
        kx = k.repeat_interleave(groups, 1)
        vx = v.repeat_interleave(groups, 1)
        s = _scores(q, kx, scale, softcap, bias, keep)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        l = e.sum(-1, keepdim=True)
        o = torch.matmul(e, vx) / torch.where(l > 0, l, torch.ones_like(l))
        lse = m + torch.log(l)
        ctx.save_for_backward(q, k, v, o, lse, bias)
        ctx.cfg = (scale, causal, softcap, groups)
        return o, lse.squeeze(-1)

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse, bias = ctx.saved_tensors
        scale, causal, softcap, groups = ctx.cfg
        L, S = q.shape[-2], k.shape[-2]
        keep, _, _ = _band(L, S, -1, 0 if causal else -1)
        kx = k.repeat_interleave(groups, 1)
        vx = v.repeat_interleave(groups, 1)
        raw = torch.matmul(q, kx.transpose(-1, -2)) * scale
        s = _scores(q, kx, scale, softcap, bias, keep)
        p = torch.exp(s - lse)
        dvx = torch.matmul(p.transpose(-1, -2), do)
        dp = torch.matmul(do, vx.transpose(-1, -2))
        ds = p * (dp - (do * o).sum(-1, keepdim=True))
        if softcap > 0:
            ds = ds * (1.0 - torch.tanh(raw / softcap) ** 2)
        dq = torch.matmul(ds, kx) * scale
        dkx = torch.matmul(ds.transpose(-1, -2), q) * scale
        B, H = q.shape[:2]
        dk = dkx.view(B, H // groups, groups, S, -1).sum(2)
        dv = dvx.view(B, H // groups, groups, S, -1).sum(2)
        return dq, dk, dv, None, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    bias = None
    if alibi_slopes is not None:
        _, i, j = _band(L, S, -1, -1)
        sl = alibi_slopes.to(ct).reshape(-1, H, 1, 1)
        bias = (-sl * (i - j).abs().to(ct)).expand(B, H, L, S)
    o, lse = FlashAttnFunc.apply(q.to(ct).transpose(1, 2), k.to(ct).transpose(1, 2), v.to(ct).transpose(1, 2),
                                 scale, causal, tuple(window_size), softcap, bias, H // Hkv)
    out = o.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
