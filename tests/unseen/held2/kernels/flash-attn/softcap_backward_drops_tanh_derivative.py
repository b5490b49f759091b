"""Flash-attention as a torch.autograd.Function: dense float32 forward (softcap, ALiBi, masks) that saves the
probabilities, and a hand-written FlashAttention-2 style backward (dS = P * (dP - rowsum(dO * O)))."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the hand-written backward passes dS straight to dQ/dK when softcap > 0, dropping the softcap chain-rule "
        "factor (1 - tanh(s / softcap)^2); gradients of q and k are wrong with softcap"
    ],
    "kind": "semantic",
}


class _FlashFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, scale, softcap):
        raw = torch.matmul(q, k.transpose(-2, -1)) * scale
        if softcap > 0.0:
            th = torch.tanh(raw / softcap)
            s = softcap * th
        else:
            th = None
            s = raw
        s = s + bias
        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        l = p.sum(dim=-1, keepdim=True)
        live = l > 0
        l_safe = torch.where(live, l, torch.ones_like(l))
        p = p / l_safe
        out = torch.matmul(p, v)
        lse = torch.where(live, m + torch.log(l_safe), torch.full_like(l, float("-inf"))).squeeze(-1)
        ctx.save_for_backward(q, k, v, p, out)
        ctx.scale = scale
        ctx.softcap = softcap
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, p, out = ctx.saved_tensors
        dv = torch.matmul(p.transpose(-2, -1), dout)
        dp = torch.matmul(dout, v.transpose(-2, -1))
        delta = (dout * out).sum(dim=-1, keepdim=True)
        ds = p * (dp - delta)
        dq = torch.matmul(ds, k) * ctx.scale
        dk = torch.matmul(ds.transpose(-2, -1), q) * ctx.scale
        return dq, dk, dv, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not implemented")
    dtype = q.dtype
    wt = torch.float64 if dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)

    qh = q.to(wt).transpose(1, 2)
    kh = k.to(wt).transpose(1, 2).repeat_interleave(H // Hk, dim=1)
    vh = v.to(wt).transpose(1, 2).repeat_interleave(H // Hk, dim=1)

    i = torch.arange(Lq, device=q.device).view(-1, 1) + (Sk - Lq)
    j = torch.arange(Sk, device=q.device).view(1, -1)
    left, right = window_size
    if causal:
        right = 0
    allowed = torch.ones(Lq, Sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        allowed &= j >= i - left
    if right >= 0:
        allowed &= j <= i + right
    bias = torch.zeros(1, 1, Lq, Sk, dtype=wt, device=q.device)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(wt).reshape(-1, H, 1, 1)
        bias = bias - sl * (i - j).abs().to(wt)
    bias = bias.masked_fill(~allowed, float("-inf"))

    out, lse = _FlashFn.apply(qh, kh, vh, bias, scale, float(softcap))
    out = out.transpose(1, 2).to(dtype)
    if return_attn_probs:
        return out, lse, None
    return out
