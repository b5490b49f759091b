TRUTH = {'api': 'flash-attn', 'bugs': ['custom backward takes the softcap derivative 1 - (s / softcap)^2 from the saved pre-mask scores, which already include the ALiBi bias, instead of from the capped score alone; dq and dk are wrong when softcap and alibi_slopes are both used (softcap_alibi_window); forward, lse and dv are right, softcap without ALiBi is right'], 'kind': 'semantic'}
import math

import torch


def _positions(L, S):
    i = torch.arange(L).view(L, 1) + (S - L)
    j = torch.arange(S).view(1, S)
    return i, j


class _FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, keep, softcap, bias):
        # q, k, v: (B, H, L/S, D), kv already expanded to H heads
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if bias is not None:
            s = s + bias
        pre = s
        s = s.masked_fill(~keep, float('-inf'))
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        lse_b = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
        p = torch.exp(s - lse_b)
        o = torch.matmul(p, v)
        ctx.save_for_backward(q, k, v, o, p, pre)
        ctx.scale, ctx.softcap = scale, softcap
        return o, lse.squeeze(-1)

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, p, pre = ctx.saved_tensors
        scale, softcap = ctx.scale, ctx.softcap
        dv = torch.matmul(p.transpose(-1, -2), do)
        dp = torch.matmul(do, v.transpose(-1, -2))
        ds = p * (dp - (do * o).sum(-1, keepdim=True))
        if softcap > 0:
            t = pre / softcap
            ds = ds * (1.0 - t * t)
        dq = torch.matmul(ds, k) * scale
        dk = torch.matmul(ds.transpose(-1, -2), q) * scale
        return dq, dk, dv, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32

    i, j = _positions(L, S)
    keep = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    bias = None
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        sl = sl.view(1, H, 1, 1) if sl.dim() == 1 else sl.view(B, H, 1, 1)
        bias = -sl * (i - j).abs().to(ct)

    qh = q.to(ct).transpose(1, 2)
    kh = k.to(ct).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    vh = v.to(ct).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    o, lse = _FlashAttnFunc.apply(qh, kh, vh, scale, keep, softcap, bias)
    out = o.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse.detach(), None
    return out
