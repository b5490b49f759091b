"""scaled_dot_product_attention with a hand-written FlashAttention-style backward (torch.autograd.Function).

Forward keeps only out and the per-row log-sum-exp; backward recomputes P = exp(s - lse) tile by tile.
"""
import math

import torch

TRUTH = {
    'api': 'sdpa',
    'bugs': [
        'Backward computes the row term D_i = sum_e dO_ie * O_ie in float32 for every input dtype (dout.float() * out.float(), cast back) instead of in float64 for float64 inputs. Forward is exact; dq, dk, dv (and the float mask gradient) of float64 inputs carry float32 rounding error (~1e-7).',
    ],
    'kind': 'precision',
}

BLOCK = 96
NEG_INF = float('-inf')


def _tile_scores(q, k, bias, keep, i0, i1, j0, j1, sm_scale, is_causal):
    s = torch.matmul(q[:, :, i0:i1], k[:, :, j0:j1].transpose(-1, -2)) * sm_scale
    if bias is not None:
        s = s + bias[:, :, i0:i1, j0:j1]
    ok = torch.ones(i1 - i0, j1 - j0, dtype=torch.bool)
    if is_causal:
        ok = torch.arange(j0, j1)[None, :] <= torch.arange(i0, i1)[:, None]
    if keep is not None:
        ok = ok & keep[:, :, i0:i1, j0:j1]
    return s.masked_fill(~ok, NEG_INF)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, keep, sm_scale, is_causal):
        N, H, L, E = q.shape
        S = k.shape[2]
        out = torch.zeros(N, H, L, v.shape[-1], dtype=q.dtype)
        lse = torch.full((N, H, L, 1), NEG_INF, dtype=q.dtype)
        for i0 in range(0, L, BLOCK):
            i1 = min(i0 + BLOCK, L)
            m = torch.full((N, H, i1 - i0, 1), NEG_INF, dtype=q.dtype)
            l = torch.zeros_like(m)
            acc = torch.zeros(N, H, i1 - i0, v.shape[-1], dtype=q.dtype)
            for j0 in range(0, S, BLOCK):
                j1 = min(j0 + BLOCK, S)
                s = _tile_scores(q, k, bias, keep, i0, i1, j0, j1, sm_scale, is_causal)
                m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                base = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                p = torch.exp(s - base)
                r = torch.exp(m - base)
                l = l * r + p.sum(-1, keepdim=True)
                acc = acc * r + torch.matmul(p, v[:, :, j0:j1])
                m = m_new
            nz = l > 0
            out[:, :, i0:i1] = acc / torch.where(nz, l, torch.ones_like(l))
            lse[:, :, i0:i1] = torch.where(nz, m + torch.log(torch.where(nz, l, torch.ones_like(l))), m)
        ctx.save_for_backward(q, k, v, bias, keep, out, lse)
        ctx.sm_scale, ctx.is_causal = sm_scale, is_causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, bias, keep, out, lse = ctx.saved_tensors
        sm_scale, is_causal = ctx.sm_scale, ctx.is_causal
        L, S = q.shape[2], k.shape[2]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dbias = torch.zeros_like(bias) if bias is not None else None
        delta = (dout.float() * out.float()).sum(-1, keepdim=True).to(out.dtype)
        lse0 = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        for i0 in range(0, L, BLOCK):
            i1 = min(i0 + BLOCK, L)
            for j0 in range(0, S, BLOCK):
                j1 = min(j0 + BLOCK, S)
                s = _tile_scores(q, k, bias, keep, i0, i1, j0, j1, sm_scale, is_causal)
                p = torch.exp(s - lse0[:, :, i0:i1])
                do = dout[:, :, i0:i1]
                dv[:, :, j0:j1] += torch.matmul(p.transpose(-1, -2), do)
                dp = torch.matmul(do, v[:, :, j0:j1].transpose(-1, -2))
                ds = p * (dp - delta[:, :, i0:i1])
                if dbias is not None:
                    dbias[:, :, i0:i1, j0:j1] = ds
                dq[:, :, i0:i1] += torch.matmul(ds, k[:, :, j0:j1]) * sm_scale
                dk[:, :, j0:j1] += torch.matmul(ds.transpose(-1, -2), q[:, :, i0:i1]) * sm_scale
        return dq, dk, dv, dbias, None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    *batch, H, L, E = query.shape
    Hkv, S, Ev = key.shape[-3], key.shape[-2], value.shape[-1]
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(E)
    wd = torch.float64 if query.dtype == torch.float64 else torch.float32
    n = math.prod(batch)
    q = query.reshape(n, H, L, E).to(wd)
    k = key.reshape(n, Hkv, S, E).to(wd)
    v = value.reshape(n, Hkv, S, Ev).to(wd)
    if enable_gqa and H != Hkv:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    bias = keep = None
    if attn_mask is not None:
        m = attn_mask.expand(*batch, H, L, S).reshape(n, H, L, S)
        if m.dtype == torch.bool:
            keep = m
        else:
            bias = m.to(wd)
    out = _Attention.apply(q, k, v, bias, keep, sm_scale, is_causal)
    return out.to(query.dtype).reshape(*batch, H, L, Ev)
