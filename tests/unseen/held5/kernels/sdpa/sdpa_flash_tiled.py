import math

import torch

TRUTH = {'api': 'sdpa', 'bugs': [], 'kind': 'correct'}

BLOCK_M = 64
BLOCK_N = 64


def _kv_hi(m1, L, S, is_causal):
    if is_causal:
        return min(S, m1)
    return S


def _tile_scores(qb, kb, scale, bias, keep, m0, m1, n0, n1, L, S, is_causal):
    s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias[:, :, m0:m1, n0:n1]
    if keep is not None:
        s = s.masked_fill(~keep[:, :, m0:m1, n0:n1], -math.inf)
    if is_causal:
        rows = torch.arange(m0, m1)
        cols = torch.arange(n0, n1)
        s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
    return s


def _attn_fwd(q, k, v, scale, bias, keep, is_causal):
    N, H, L, E = q.shape
    S, Ev = k.shape[2], v.shape[3]
    out = torch.empty(N, H, L, Ev, dtype=q.dtype)
    lse = torch.empty(N, H, L, dtype=q.dtype)
    for m0 in range(0, L, BLOCK_M):
        m1 = min(L, m0 + BLOCK_M)
        qb = q[:, :, m0:m1]
        row_max = torch.full((N, H, m1 - m0), -math.inf, dtype=q.dtype)
        row_sum = torch.zeros(N, H, m1 - m0, dtype=q.dtype)
        acc = torch.zeros(N, H, m1 - m0, Ev, dtype=q.dtype)
        for n0 in range(0, _kv_hi(m1, L, S, is_causal), BLOCK_N):
            n1 = min(S, n0 + BLOCK_N)
            s = _tile_scores(qb, k[:, :, n0:n1], scale, bias, keep, m0, m1, n0, n1, L, S, is_causal)
            new_max = torch.maximum(row_max, s.amax(-1))
            ref = torch.where(new_max == -math.inf, torch.zeros_like(new_max), new_max)
            p = torch.exp(s - ref[..., None])
            corr = torch.exp(row_max - ref)
            row_sum = row_sum * corr + p.sum(-1)
            acc = acc * corr[..., None] + torch.matmul(p, v[:, :, n0:n1])
            row_max = new_max
        seen = row_sum > 0
        denom = torch.where(seen, row_sum, torch.ones_like(row_sum))
        out[:, :, m0:m1] = torch.where(seen[..., None], acc / denom[..., None], torch.zeros_like(acc))
        lse[:, :, m0:m1] = torch.where(seen, row_max + torch.log(denom), torch.full_like(row_max, -math.inf))
    return out, lse


def _attn_bwd(do, q, k, v, out, lse, scale, bias, keep, is_causal, need_dbias):
    N, H, L, E = q.shape
    S = k.shape[2]
    delta = (do * out).sum(-1)
    lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    dbias = torch.zeros(N, H, L, S, dtype=q.dtype) if need_dbias else None
    for m0 in range(0, L, BLOCK_M):
        m1 = min(L, m0 + BLOCK_M)
        qb, dob = q[:, :, m0:m1], do[:, :, m0:m1]
        dq_b = torch.zeros_like(qb)
        for n0 in range(0, _kv_hi(m1, L, S, is_causal), BLOCK_N):
            n1 = min(S, n0 + BLOCK_N)
            kb, vb = k[:, :, n0:n1], v[:, :, n0:n1]
            s = _tile_scores(qb, kb, scale, bias, keep, m0, m1, n0, n1, L, S, is_causal)
            p = torch.exp(s - lse[:, :, m0:m1, None])
            dv[:, :, n0:n1] += torch.matmul(p.transpose(-1, -2), dob)
            dp = torch.matmul(dob, vb.transpose(-1, -2))
            ds = p * (dp - delta[:, :, m0:m1, None])
            if dbias is not None:
                dbias[:, :, m0:m1, n0:n1] = ds
            dq_b += torch.matmul(ds, kb)
            dk[:, :, n0:n1] += torch.matmul(ds.transpose(-1, -2), qb) * scale
        dq[:, :, m0:m1] = dq_b * scale
    return dq, dk, dv, dbias


class _FlashSDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, enable_gqa):
        dtype = query.dtype
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        *batch, H, L, E = query.shape
        Hkv, S, Ev = key.shape[-3], key.shape[-2], value.shape[-1]
        N = 1
        for d in batch:
            N *= d
        q = query.reshape(N, H, L, E).to(acc)
        k = key.reshape(N, Hkv, S, E).to(acc)
        v = value.reshape(N, Hkv, S, Ev).to(acc)
        group = 1
        if enable_gqa and H != Hkv:
            group = H // Hkv
            idx = torch.arange(H) // group
            k = k[:, idx]
            v = v[:, idx]
        bias = keep = None
        if attn_mask is not None:
            m = attn_mask.expand(*batch, H, L, S).reshape(N, H, L, S)
            if m.dtype == torch.bool:
                keep = m
            else:
                bias = m.to(acc)
        out, lse = _attn_fwd(q, k, v, scale, bias, keep, is_causal)
        ctx.save_for_backward(q, k, v, out, lse, bias, keep)
        ctx.meta = (batch, H, Hkv, group, scale, is_causal, dtype,
                    attn_mask.shape if attn_mask is not None else None, attn_mask is not None and bias is not None)
        return out.reshape(*batch, H, L, Ev).to(dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, bias, keep = ctx.saved_tensors
        batch, H, Hkv, group, scale, is_causal, dtype, mshape, has_bias = ctx.meta
        N, _, L, E = q.shape
        S, Ev = k.shape[2], v.shape[3]
        do = dout.reshape(N, H, L, Ev).to(q.dtype)
        need_dbias = has_bias and ctx.needs_input_grad[3]
        dq, dk, dv, dbias = _attn_bwd(do, q, k, v, out, lse, scale, bias, keep, is_causal, need_dbias)
        if group > 1:
            dk = dk.view(N, Hkv, group, S, E).sum(2)
            dv = dv.view(N, Hkv, group, S, Ev).sum(2)
        dq = dq.reshape(*batch, H, L, E).to(dtype)
        dk = dk.reshape(*batch, Hkv, S, E).to(dtype)
        dv = dv.reshape(*batch, Hkv, S, Ev).to(dtype)
        dmask = None
        if need_dbias:
            dmask = dbias.reshape(*batch, H, L, S).sum_to_size(mshape).to(dtype)
        return dq, dk, dv, dmask, None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    return _FlashSDPA.apply(query, key, value, attn_mask, is_causal, scale, enable_gqa)
