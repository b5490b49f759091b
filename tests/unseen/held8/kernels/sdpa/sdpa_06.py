TRUTH = {
    "api": "sdpa",
    "bugs": [
        "backward computes D = rowsum(dO*O) in float32 even for float64 inputs; float64 dq/dk/dv (and dmask) lose precision, forward exact"
    ],
    "kind": "precision"
}

import math
import torch

BQ = 64
BK = 32


class _Flash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, allowed, sc):
        N, H, L, E = q.shape
        S = k.shape[2]
        Ev = v.shape[-1]
        o = torch.zeros(N, H, L, Ev, dtype=q.dtype)
        lse = torch.full((N, H, L), float('-inf'), dtype=q.dtype)
        for i0 in range(0, L, BQ):
            i1 = min(i0 + BQ, L)
            qi = q[:, :, i0:i1]
            m = torch.full((N, H, i1 - i0), float('-inf'), dtype=q.dtype)
            l = torch.zeros(N, H, i1 - i0, dtype=q.dtype)
            acc = torch.zeros(N, H, i1 - i0, Ev, dtype=q.dtype)
            for j0 in range(0, S, BK):
                j1 = min(j0 + BK, S)
                s = torch.matmul(qi, k[:, :, j0:j1].transpose(-1, -2)) * sc
                if bias is not None:
                    s = s + bias[:, :, i0:i1, j0:j1]
                s = s.masked_fill(~allowed[:, :, i0:i1, j0:j1], float('-inf'))
                m_new = torch.maximum(m, s.amax(-1))
                m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
                alpha = torch.exp(m - m_safe)
                p = torch.exp(s - m_safe[..., None])
                l = l * alpha + p.sum(-1)
                acc = acc * alpha[..., None] + torch.matmul(p, v[:, :, j0:j1])
                m = m_new
            nz = l > 0
            o[:, :, i0:i1] = acc / torch.where(nz, l, torch.ones_like(l))[..., None]
            lse[:, :, i0:i1] = torch.where(nz, m + torch.log(torch.where(nz, l, torch.ones_like(l))),
                                           torch.full_like(l, float('-inf')))
        ctx.save_for_backward(q, k, v, bias if bias is not None else torch.empty(0), allowed, o, lse)
        ctx.sc = sc
        ctx.has_bias = bias is not None
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, bias, allowed, o, lse = ctx.saved_tensors
        sc = ctx.sc
        N, H, L, E = q.shape
        S = k.shape[2]
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        dbias = torch.zeros(N, H, L, S, dtype=q.dtype) if ctx.has_bias else None
        D = (do.float() * o.float()).sum(-1).to(q.dtype)
        lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        for j0 in range(0, S, BK):
            j1 = min(j0 + BK, S)
            kj, vj = k[:, :, j0:j1], v[:, :, j0:j1]
            for i0 in range(0, L, BQ):
                i1 = min(i0 + BQ, L)
                s = torch.matmul(q[:, :, i0:i1], kj.transpose(-1, -2)) * sc
                if ctx.has_bias:
                    s = s + bias[:, :, i0:i1, j0:j1]
                s = s.masked_fill(~allowed[:, :, i0:i1, j0:j1], float('-inf'))
                p = torch.exp(s - lse_safe[:, :, i0:i1, None])
                doi = do[:, :, i0:i1]
                dv[:, :, j0:j1] += torch.matmul(p.transpose(-1, -2), doi)
                dp = torch.matmul(doi, vj.transpose(-1, -2))
                ds = p * (dp - D[:, :, i0:i1, None])
                if ctx.has_bias:
                    dbias[:, :, i0:i1, j0:j1] = ds
                dq[:, :, i0:i1] += torch.matmul(ds, kj) * sc
                dk[:, :, j0:j1] += torch.matmul(ds.transpose(-1, -2), q[:, :, i0:i1]) * sc
        return dq, dk, dv, dbias, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    E = query.shape[-1]
    H, L = query.shape[-3], query.shape[-2]
    Hkv, S = key.shape[-3], key.shape[-2]
    Ev = value.shape[-1]
    batch = query.shape[:-3]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    cdt = torch.float32 if query.dtype in (torch.bfloat16, torch.float16) else query.dtype
    q = query.reshape(-1, H, L, E).to(cdt)
    k = key.reshape(-1, Hkv, S, E).to(cdt)
    v = value.reshape(-1, Hkv, S, Ev).to(cdt)
    N = q.shape[0]
    if enable_gqa and H != Hkv:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    allowed = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        allowed = torch.tril(allowed)
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            allowed = allowed & attn_mask
        else:
            bias = attn_mask.to(cdt).expand(*batch, H, L, S).reshape(N, H, L, S)
    allowed = allowed.expand(*batch, H, L, S).reshape(N, H, L, S)
    out = _Flash.apply(q, k, v, bias, allowed, sc)
    return out.reshape(*batch, H, L, Ev).to(query.dtype)
