"""GQA-aware SDPA with a custom backward that avoids materialising the repeated K/V gradients."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "with enable_gqa the backward keeps only the first query head's contribution of each group for grad_key "
        "and grad_value (a strided slice) instead of summing over the group's heads",
        "a row that sees no key (fully masked by attn_mask) gives NaN output (softmax over all -inf) instead of "
        "zeros",
    ],
    "kind": "two",
}


class _GQAAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask_bias, scale, group):
        acc = torch.float64 if q.dtype == torch.float64 else torch.float32
        kx = k.repeat_interleave(group, dim=-3).to(acc)
        vx = v.repeat_interleave(group, dim=-3).to(acc)
        s = torch.matmul(q.to(acc), kx.transpose(-2, -1)) * scale + mask_bias
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p, vx)
        ctx.save_for_backward(q, k, v, p)
        ctx.scale, ctx.group = scale, group
        return o.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, p = ctx.saved_tensors
        g = ctx.group
        acc = p.dtype
        kx = k.repeat_interleave(g, dim=-3).to(acc)
        vx = v.repeat_interleave(g, dim=-3).to(acc)
        do = grad_out.to(acc)
        dvx = torch.matmul(p.transpose(-2, -1), do)
        dp = torch.matmul(do, vx.transpose(-2, -1))
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        dq = torch.matmul(ds, kx) * ctx.scale
        dkx = torch.matmul(ds.transpose(-2, -1), q.to(acc)) * ctx.scale
        # collapse the repeated heads back onto their kv head
        dk = dkx[..., ::g, :, :]
        dv = dvx[..., ::g, :, :]
        return dq.to(q.dtype), dk.sum_to_size(k.shape).to(k.dtype), dv.sum_to_size(v.shape).to(v.dtype), \
            None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    H, Hkv = query.shape[-3], key.shape[-3]
    group = H // Hkv if enable_gqa else 1
    L, S = query.shape[-2], key.shape[-2]
    bias = torch.zeros(L, S, dtype=acc, device=query.device)
    if is_causal:
        bias = bias.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(~attn_mask, float("-inf"))
        else:
            bias = bias + attn_mask.to(acc)
    return _GQAAttention.apply(query, key, value, bias, scale, group)
