TRUTH = {'api': 'sdpa', 'bugs': ['backward recomputes the probabilities as exp(q k^T * scale - lse) without re-adding the float attn_mask, although the saved lse includes it; dq, dk, dv and dmask are wrong on every float-mask case (float_mask_HLS_grad, float_mask_causal_11LS, mqa_floatmask_BHLS); forward is right', 'enable_gqa expands kv heads with unsqueeze(-4).expand(groups, Hkv).reshape, i.e. tiled order, so query head h reads kv head h % Hkv instead of h // (H // Hkv); wrong when 1 < Hkv < H (gqa_6_2_causal), MQA is unaffected'], 'kind': 'two'}
import math

import torch


def _expand_kv(x, groups):
    if groups == 1:
        return x
    shape = x.shape
    x = x.unsqueeze(-4).expand(*shape[:-3], groups, *shape[-3:])
    return x.reshape(*shape[:-3], groups * shape[-3], *shape[-2:])


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, keep, scale):
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        if bias is not None:
            s = s + bias
        s = s.masked_fill(~keep, float('-inf'))
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        lse = torch.where(torch.isneginf(lse), torch.full_like(lse, float('inf')), lse)
        p = torch.exp(s - lse)
        o = torch.matmul(p, v)
        ctx.save_for_backward(q, k, v, o, lse, keep)
        ctx.scale = scale
        ctx.bias_grad = bias is not None
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, keep = ctx.saved_tensors
        scale = ctx.scale
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        s = s.masked_fill(~keep, float('-inf'))
        p = torch.exp(s - lse)
        dv = torch.matmul(p.transpose(-1, -2), do)
        dp = torch.matmul(do, v.transpose(-1, -2))
        delta = (do * o).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        dq = torch.matmul(ds, k) * scale
        dk = torch.matmul(ds.transpose(-1, -2), q) * scale
        return dq, dk, dv, (ds if ctx.bias_grad else None), None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    H, L, E = query.shape[-3:]
    Hkv, S = key.shape[-3], key.shape[-2]
    scale = scale if scale is not None else 1.0 / math.sqrt(E)
    dt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(dt), key.to(dt), value.to(dt)
    if enable_gqa:
        k = _expand_kv(k, H // Hkv)
        v = _expand_kv(v, H // Hkv)
    score_shape = torch.broadcast_shapes(q.shape[:-1], k.shape[:-2] + (1,))[:-1] + (L, S)

    keep = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        keep = keep.tril()
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            bias = attn_mask.to(dt).expand(score_shape)
    keep = keep.expand(score_shape).contiguous()
    out = _Attention.apply(q, k, v, bias, keep, scale)
    return out.to(query.dtype)
