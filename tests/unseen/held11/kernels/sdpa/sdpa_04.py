TRUTH = {'api': 'sdpa', 'bugs': ['hand-written backward folds the softmax scale into dS once and returns that scaled dS as the gradient of the additive float attn_mask; the mask gradient must be the unscaled dS, so dmask is off by the factor `scale` on every float-mask case (float_mask_HLS_grad, float_mask_causal_11LS, mqa_floatmask_BHLS); out, dq, dk, dv are right'], 'kind': 'semantic'}
import math

import torch


class FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, keep, sm_scale):
        s = torch.matmul(q, k.transpose(-2, -1)) * sm_scale
        if bias is not None:
            s = s + bias
        if keep is not None:
            s = s.masked_fill(~keep, float('-inf'))
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        l = p.sum(-1, keepdim=True)
        p = p / torch.where(l > 0, l, torch.ones_like(l))
        o = torch.matmul(p, v)
        ctx.save_for_backward(q, k, v, p, o)
        ctx.sm_scale = sm_scale
        ctx.needs_bias_grad = bias is not None and ctx.needs_input_grad[3]
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, p, o = ctx.saved_tensors
        sm_scale = ctx.sm_scale
        dv = torch.matmul(p.transpose(-2, -1), do)
        dp = torch.matmul(do, v.transpose(-2, -1))
        di = (o * do).sum(-1, keepdim=True)
        ds = p * (dp - di) * sm_scale
        dq = torch.matmul(ds, k)
        dk = torch.matmul(ds.transpose(-2, -1), q)
        dbias = ds if ctx.needs_bias_grad else None
        return dq, dk, dv, dbias, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    L, E = query.shape[-2:]
    S = key.shape[-2]
    H, Hkv = query.shape[-3], key.shape[-3]
    if scale is None:
        scale = E ** -0.5
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(ct), key.to(ct), value.to(ct)
    if enable_gqa and H != Hkv:
        k = k.repeat_interleave(H // Hkv, -3)
        v = v.repeat_interleave(H // Hkv, -3)

    out_shape = torch.broadcast_shapes(q.shape[:-1], k.shape[:-2] + (1,))
    score_shape = out_shape + (S,)
    keep = None
    bias = None
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            bias = attn_mask.to(ct).expand(score_shape)
    if keep is not None:
        keep = keep.expand(score_shape)

    out = FusedAttention.apply(q, k, v, bias, keep, scale)
    return out.to(query.dtype)
