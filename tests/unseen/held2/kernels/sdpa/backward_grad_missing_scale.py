"""SDPA as a torch.autograd.Function: dense float32 forward saving the probabilities, hand-written backward."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the hand-written backward computes dQ = dS @ K and dK = dS^T @ Q without the softmax scale factor; "
        "since S = scale * Q K^T both must be multiplied by scale"
    ],
    "kind": "semantic",
}


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, scale):
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        if bias is not None:
            s = s + bias
        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        l = p.sum(dim=-1, keepdim=True)
        p = p / torch.where(l > 0, l, torch.ones_like(l))
        out = torch.matmul(p, v)
        ctx.save_for_backward(q, k, v, p, out)
        ctx.scale = scale
        ctx.bias_shape = None if bias is None else bias.shape
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, p, out = ctx.saved_tensors
        dv = torch.matmul(p.transpose(-2, -1), dout)
        dp = torch.matmul(dout, v.transpose(-2, -1))
        delta = (dout * out).sum(dim=-1, keepdim=True)
        ds = p * (dp - delta)
        dq = torch.matmul(ds, k)
        dk = torch.matmul(ds.transpose(-2, -1), q)
        dbias = None
        if ctx.bias_shape is not None and ctx.needs_input_grad[3]:
            dbias = ds.sum_to_size(ctx.bias_shape)
        return dq, dk, dv, dbias, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
    dt = query.dtype
    wt = torch.float64 if dt == torch.float64 else torch.float32
    q, k, v = query.to(wt), key.to(wt), value.to(wt)
    L, E, S = q.shape[-2], q.shape[-1], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    if enable_gqa and q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)

    bias = None
    if is_causal:
        causal = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        bias = torch.zeros(L, S, dtype=wt, device=q.device).masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            extra = torch.zeros(attn_mask.shape, dtype=wt, device=q.device).masked_fill(~attn_mask, float("-inf"))
        else:
            extra = attn_mask.to(wt)
        bias = extra if bias is None else bias + extra
    out = _Attention.apply(q, k, v, bias, scale)
    return out.to(dt)
