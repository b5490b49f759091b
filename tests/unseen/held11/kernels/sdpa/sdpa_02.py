TRUTH = {'api': 'sdpa', 'bugs': ['custom backward folds the per-query-head dK/dV back onto kv heads with view(N, groups, Hkv, ...).sum(1), which pairs query head h with kv head h % Hkv, while the forward uses repeat_interleave (kv head h // groups); dk and dv are wrong with enable_gqa when 1 < Hkv < H (gqa_6_2_causal); forward and MQA (Hkv = 1) are correct'], 'kind': 'semantic'}
import math

import torch


def _spread_heads(x, groups):
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _fold_heads(x, groups):
    if groups == 1:
        return x
    n, h, s, d = x.shape
    return x.view(n, groups, h // groups, s, d).sum(1)


class _SDPAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, keep, scale, groups):
        kx = _spread_heads(k, groups)
        vx = _spread_heads(v, groups)
        s = torch.matmul(q, kx.transpose(-1, -2)) * scale
        if bias is not None:
            s = s + bias
        if keep is not None:
            s = s.masked_fill(~keep, float('-inf'))
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
        p = torch.exp(s - lse)
        o = torch.matmul(p, vx)
        ctx.save_for_backward(q, k, v, p, o)
        ctx.scale = scale
        ctx.groups = groups
        ctx.has_bias = bias is not None
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, p, o = ctx.saved_tensors
        scale, groups = ctx.scale, ctx.groups
        kx = _spread_heads(k, groups)
        vx = _spread_heads(v, groups)
        dvx = torch.matmul(p.transpose(-1, -2), do)
        dp = torch.matmul(do, vx.transpose(-1, -2))
        delta = (do * o).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        dq = torch.matmul(ds, kx) * scale
        dkx = torch.matmul(ds.transpose(-1, -2), q) * scale
        dk = _fold_heads(dkx, groups)
        dv = _fold_heads(dvx, groups)
        dbias = ds if ctx.has_bias else None
        return dq, dk, dv, dbias, None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    *batch, H, L, E = query.shape
    Hkv, S = key.shape[-3], key.shape[-2]
    Ev = value.shape[-1]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    groups = H // Hkv if enable_gqa else 1
    work = torch.float64 if query.dtype == torch.float64 else torch.float32

    q = query.reshape(-1, H, L, E).to(work)
    k = key.reshape(-1, Hkv, S, E).to(work)
    v = value.reshape(-1, Hkv, S, Ev).to(work)
    N = q.shape[0]

    keep = None
    bias = None
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool).tril()
    if attn_mask is not None:
        full = attn_mask.expand(*batch, H, L, S).reshape(N, H, L, S)
        if attn_mask.dtype == torch.bool:
            keep = full if keep is None else keep & full
        else:
            bias = full.to(work)
    if keep is not None:
        keep = keep.expand(N, H, L, S)

    out = _SDPAFunction.apply(q, k, v, bias, keep, sc, groups)
    return out.reshape(*batch, H, L, Ev).to(query.dtype)
