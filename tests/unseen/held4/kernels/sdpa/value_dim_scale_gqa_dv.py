import math

import torch

TRUTH = {"api": "sdpa", "bugs": ["The default scale is computed from the value head dim (1/sqrt(Ev)) instead of the query/key head dim (1/sqrt(E)); wrong whenever Ev != E and scale is None.", "In the backward the per-query-head value gradients of a GQA group are averaged (mean over the group) instead of summed into the shared kv head, so dV is too small by H / Hkv when enable_gqa is used with H != Hkv."], "kind": "two"}

BLOCK_M = 32
BLOCK_N = 32


def _acc_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


class _TiledAttention(torch.autograd.Function):
    """Flash-style attention over (Z, H, L, E) tensors; k/v carry Hkv heads."""

    @staticmethod
    def forward(ctx, q, k, v, bias, keep, is_causal, scale, group):
        Z, H, L, E = q.shape
        S, Ev = k.shape[2], v.shape[3]
        acc_t = _acc_dtype(q.dtype)
        kv_head = torch.arange(H, device=q.device) // group
        out = torch.empty(Z, H, L, Ev, dtype=acc_t, device=q.device)
        lse = torch.empty(Z, H, L, dtype=acc_t, device=q.device)
        for m0 in range(0, L, BLOCK_M):
            m1 = min(m0 + BLOCK_M, L)
            qb = q[:, :, m0:m1].to(acc_t)
            rows = torch.arange(m0, m1, device=q.device)[:, None]
            m_i = torch.full((Z, H, m1 - m0), -math.inf, dtype=acc_t, device=q.device)
            l_i = torch.zeros_like(m_i)
            acc = torch.zeros(Z, H, m1 - m0, Ev, dtype=acc_t, device=q.device)
            n_stop = min(S, m1) if is_causal else S
            for n0 in range(0, n_stop, BLOCK_N):
                n1 = min(n0 + BLOCK_N, S)
                kb = k[:, kv_head, n0:n1].to(acc_t)
                vb = v[:, kv_head, n0:n1].to(acc_t)
                s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
                if bias is not None:
                    s = s + bias[:, :, m0:m1, n0:n1].to(acc_t)
                if keep is not None:
                    s = s.masked_fill(~keep[:, :, m0:m1, n0:n1], -math.inf)
                if is_causal:
                    cols = torch.arange(n0, n1, device=q.device)[None, :]
                    s = s.masked_fill(cols > rows, -math.inf)
                m_new = torch.maximum(m_i, s.amax(-1))
                m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                alpha = torch.exp(m_i - m_use)
                p = torch.exp(s - m_use[..., None])
                l_i = l_i * alpha + p.sum(-1)
                acc = acc * alpha[..., None] + torch.matmul(p, vb)
                m_i = m_new
            empty = l_i == 0
            out[:, :, m0:m1] = acc / torch.where(empty, torch.ones_like(l_i), l_i)[..., None]
            lse[:, :, m0:m1] = torch.where(empty, torch.full_like(l_i, -math.inf), m_i + torch.log(l_i))
        ctx.save_for_backward(q, k, v, bias, keep, out, lse)
        ctx.is_causal, ctx.scale, ctx.group = is_causal, scale, group
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, bias, keep, out, lse = ctx.saved_tensors
        is_causal, scale, group = ctx.is_causal, ctx.scale, ctx.group
        Z, H, L, E = q.shape
        Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[3]
        acc_t = _acc_dtype(q.dtype)
        kv_head = torch.arange(H, device=q.device) // group
        do = dout.to(acc_t)
        delta = (do * out.to(acc_t)).sum(-1)
        lse_use = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        dq = torch.zeros(Z, H, L, E, dtype=acc_t, device=q.device)
        dk = torch.zeros(Z, H, S, E, dtype=acc_t, device=q.device)
        dv = torch.zeros(Z, H, S, Ev, dtype=acc_t, device=q.device)
        want_dbias = bias is not None and ctx.needs_input_grad[3]
        dbias = torch.zeros(Z, H, L, S, dtype=acc_t, device=q.device) if want_dbias else None
        for n0 in range(0, S, BLOCK_N):
            n1 = min(n0 + BLOCK_N, S)
            kb = k[:, kv_head, n0:n1].to(acc_t)
            vb = v[:, kv_head, n0:n1].to(acc_t)
            cols = torch.arange(n0, n1, device=q.device)[None, :]
            m_start = n0 if is_causal else 0
            for m0 in range(m_start - m_start % BLOCK_M, L, BLOCK_M):
                m1 = min(m0 + BLOCK_M, L)
                qb = q[:, :, m0:m1].to(acc_t)
                s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
                if bias is not None:
                    s = s + bias[:, :, m0:m1, n0:n1].to(acc_t)
                if keep is not None:
                    s = s.masked_fill(~keep[:, :, m0:m1, n0:n1], -math.inf)
                if is_causal:
                    rows = torch.arange(m0, m1, device=q.device)[:, None]
                    s = s.masked_fill(cols > rows, -math.inf)
                p = torch.exp(s - lse_use[:, :, m0:m1, None])
                dob = do[:, :, m0:m1]
                dv[:, :, n0:n1] += torch.matmul(p.transpose(-1, -2), dob)
                dp = torch.matmul(dob, vb.transpose(-1, -2))
                ds = p * (dp - delta[:, :, m0:m1, None])
                if want_dbias:
                    dbias[:, :, m0:m1, n0:n1] = ds
                dq[:, :, m0:m1] += torch.matmul(ds, kb) * scale
                dk[:, :, n0:n1] += torch.matmul(ds.transpose(-1, -2), qb) * scale
        dk = dk.view(Z, Hkv, group, S, E).sum(2)
        dv = dv.view(Z, Hkv, group, S, Ev).mean(2)
        return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype),
                dbias.to(bias.dtype) if want_dbias else None, None, None, None, None)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    *batch, H, L, E = query.shape
    Hkv, S = key.shape[-3], key.shape[-2]
    Ev = value.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(Ev)
    if H != Hkv:
        if not enable_gqa or H % Hkv != 0:
            raise ValueError("query heads must match key heads unless enable_gqa")
    group = H // Hkv
    Z = 1
    for d in batch:
        Z *= d
    q = query.reshape(Z, H, L, E)
    k = key.reshape(Z, Hkv, S, E)
    v = value.reshape(Z, Hkv, S, Ev)
    bias = keep = None
    if attn_mask is not None:
        full = attn_mask.expand(*batch, H, L, S).reshape(Z, H, L, S)
        if attn_mask.dtype == torch.bool:
            keep = full
        else:
            bias = full
    out = _TiledAttention.apply(q, k, v, bias, keep, bool(is_causal), float(scale), group)
    return out.reshape(*batch, H, L, Ev)
