TRUTH = {'api': 'sdpa',
 'bugs': ['is_causal mask is aligned bottom-right (key j allowed if j <= i + S - L) instead of top-left j <= i; '
          'wrong whenever is_causal and L != S (causal_L<S, causal_L>S, bool_causal_L!=S), forward and backward'],
 'kind': 'semantic'}

import math
import torch

BLOCK_N = 32


class _FlashSDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, sc, want_dbias):
        S = k.shape[-2]
        m = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
        l = torch.zeros(q.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(S, j0 + BLOCK_N)
            s = torch.matmul(q, k[..., j0:j1, :].transpose(-1, -2)) * sc + bias[..., j0:j1]
            m_new = torch.maximum(m, s.amax(dim=-1))
            m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_use)
            p = torch.exp(s - m_use[..., None])
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + torch.matmul(p, v[..., j0:j1, :])
            m = m_new
        out = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
        lse = torch.where(l > 0, m + torch.log(l), torch.full_like(l, -math.inf))
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.sc = sc
        ctx.want_dbias = want_dbias
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, bias, out, lse = ctx.saved_tensors
        sc = ctx.sc
        S = k.shape[-2]
        do = do.to(q.dtype)
        delta = (do * out).sum(dim=-1, keepdim=True)
        lse_use = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None]
        dq = torch.zeros_like(q)
        dk_parts, dv_parts, db_parts = [], [], []
        for j0 in range(0, S, BLOCK_N):
            j1 = min(S, j0 + BLOCK_N)
            kj, vj = k[..., j0:j1, :], v[..., j0:j1, :]
            s = torch.matmul(q, kj.transpose(-1, -2)) * sc + bias[..., j0:j1]
            p = torch.exp(s - lse_use)
            dv_parts.append(torch.matmul(p.transpose(-1, -2), do))
            dp = torch.matmul(do, vj.transpose(-1, -2))
            ds = p * (dp - delta)
            dq = dq + torch.matmul(ds, kj) * sc
            dk_parts.append(torch.matmul(ds.transpose(-1, -2), q) * sc)
            if ctx.want_dbias:
                db_parts.append(ds)
        dk = torch.cat(dk_parts, dim=-2)
        dv = torch.cat(dv_parts, dim=-2)
        db = torch.cat(db_parts, dim=-1) if ctx.want_dbias else None
        return dq, dk, dv, db, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    dt = query.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    E = query.shape[-1]
    L, S = query.shape[-2], key.shape[-2]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    q, k, v = query.to(cd), key.to(cd), value.to(cd)
    H, Hkv = q.shape[-3], k.shape[-3]
    if enable_gqa and H != Hkv:
        g = H // Hkv
        k = k.repeat_interleave(g, dim=-3)
        v = v.repeat_interleave(g, dim=-3)
    row = torch.arange(L).view(L, 1)
    col = torch.arange(S).view(1, S)
    keep = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        keep = keep & (col <= row + (S - L))
    bias = torch.zeros(L, S, dtype=cd)
    want_dbias = False
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            bias = bias + attn_mask.to(cd)
            want_dbias = attn_mask.requires_grad
    bias = bias.masked_fill(~keep, -math.inf)
    full = torch.broadcast_shapes(q.shape[:-1] + (S,), bias.shape)
    bias = bias.expand(full)
    out = _FlashSDPA.apply(q, k, v, bias, sc, want_dbias)
    return out.to(dt)
