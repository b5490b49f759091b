"""SDPA with sinks, FlashAttention-2 layout: key-tiled online-softmax forward (m and l seeded with the sink) and a
backward that walks query blocks, recomputing P from the saved lse and the mask.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the backward assigns dsink inside the query-block loop instead of accumulating it, so only the last block of "
        "16 query rows contributes to the sinks' gradient when L > 16",
        "the backward rebuilds the mask from bool masks and is_causal only, so a float attn_mask's additive bias is "
        "left out when P is recomputed and dq, dk, dv (and dsink) are wrong for float masks",
    ],
    "kind": "two",
}

BLOCK_M, BLOCK_N = 16, 16


class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, keep, fbias, scale):
        N, H, L, _ = q.shape
        S = k.shape[-2]
        m = sinks.view(1, H, 1).expand(N, H, L).clone()
        l_sum = torch.ones_like(m)
        acc = torch.zeros(N, H, L, v.shape[-1], dtype=q.dtype, device=q.device)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(S, j0 + BLOCK_N)
            s = torch.matmul(q, k[:, :, j0:j1].transpose(-2, -1)) * scale
            if fbias is not None:
                s = s + fbias[..., j0:j1]
            s = s.masked_fill(~keep[..., j0:j1], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            a = torch.exp(m - m_new)
            p = torch.exp(s - m_new.unsqueeze(-1))
            l_sum = l_sum * a + p.sum(-1)
            acc = acc * a.unsqueeze(-1) + torch.matmul(p, v[:, :, j0:j1])
            m = m_new
        out = acc / l_sum.unsqueeze(-1)
        lse = m + torch.log(l_sum)
        ctx.save_for_backward(q, k, v, sinks, keep, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks, keep, out, lse = ctx.saved_tensors
        scale = ctx.scale
        L = q.shape[-2]
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        dsinks = torch.zeros_like(sinks)
        for i0 in range(0, L, BLOCK_M):
            i1 = min(L, i0 + BLOCK_M)
            qi, doi, oi, li = q[:, :, i0:i1], dout[:, :, i0:i1], out[:, :, i0:i1], lse[:, :, i0:i1]
            s = torch.matmul(qi, k.transpose(-2, -1)) * scale
            s = s.masked_fill(~keep[..., i0:i1, :], float("-inf"))
            p = torch.exp(s - li.unsqueeze(-1))
            di = (doi * oi).sum(-1)
            dv += torch.matmul(p.transpose(-2, -1), doi)
            ds = p * (torch.matmul(doi, v.transpose(-2, -1)) - di.unsqueeze(-1))
            dq[:, :, i0:i1] = torch.matmul(ds, k) * scale
            dk += torch.matmul(ds.transpose(-2, -1), qi) * scale
            dsinks = -(torch.exp(sinks.view(1, -1, 1) - li) * di).sum(dim=(0, 2))
        return dq, dk, dv, dsinks, None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p > 0 is not supported")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    *lead, H, L, E = query.shape
    Hkv, S, Ev = key.shape[-3], key.shape[-2], value.shape[-1]
    q = query.to(cdt).reshape(-1, H, L, E)
    k = key.to(cdt).reshape(-1, Hkv, S, E)
    v = value.to(cdt).reshape(-1, Hkv, S, Ev)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    keep = torch.ones(L, S, dtype=torch.bool, device=query.device)
    if is_causal:
        keep = keep.tril()
    fbias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            fbias = attn_mask.to(cdt).expand(*lead, H, L, S).reshape(-1, H, L, S)
            keep = keep & ~torch.isneginf(fbias)
    keep = keep.expand(*lead, H, L, S).reshape(-1, H, L, S)
    sk = torch.full((H,), torch.finfo(cdt).min, dtype=cdt, device=query.device) if sinks is None else sinks.to(cdt)
    out = _Fn.apply(q, k, v, sk, keep, fbias, scale)
    return out.reshape(*lead, H, L, Ev).to(query.dtype)
