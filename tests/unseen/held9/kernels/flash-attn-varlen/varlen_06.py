TRUTH = {'api': 'flash-attn-varlen', 'bugs': [], 'kind': 'correct'}

import math
import torch

BLOCK_N = 32


def _scores(qs, ks, sc, softcap, slopes, off, j0, left, right):
    # qs (Hkv, g, L, D), ks (Hkv, 1, n, D)
    raw = torch.matmul(qs, ks.transpose(-1, -2)) * sc
    t = None
    s = raw
    if softcap > 0:
        t = torch.tanh(raw / softcap)
        s = softcap * t
    L, n = qs.shape[-2], ks.shape[-2]
    qp = torch.arange(L).view(L, 1) + off
    kp = torch.arange(j0, j0 + n).view(1, n)
    if slopes is not None:
        s = s - slopes * (qp - kp).abs().to(s.dtype)
    ok = torch.ones(L, n, dtype=torch.bool)
    if left >= 0:
        ok = ok & (kp >= qp - left)
    if right >= 0:
        ok = ok & (kp <= qp + right)
    return s.masked_fill(~ok, -math.inf), t


class _VarlenFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, sc, softcap, slopes, left, right):
        # q (Hkv, g, total_q, D), k/v (Hkv, 1, total_k, D), slopes (B, Hkv, g, 1, 1) or None
        out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        lse = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
        for b in range(len(cu_q) - 1):
            qs, qe, ks, ke = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
            if qe == qs:
                continue
            qb = q[..., qs:qe, :]
            sl = None if slopes is None else slopes[b]
            m = torch.full(qb.shape[:-1], -math.inf, dtype=q.dtype)
            l = torch.zeros(qb.shape[:-1], dtype=q.dtype)
            acc = torch.zeros(qb.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
            off = (ke - ks) - (qe - qs)
            for j0 in range(0, ke - ks, BLOCK_N):
                j1 = min(ke - ks, j0 + BLOCK_N)
                s, _ = _scores(qb, k[..., ks + j0:ks + j1, :], sc, softcap, sl, off, j0, left, right)
                m_new = torch.maximum(m, s.amax(dim=-1))
                m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                alpha = torch.exp(m - m_use)
                p = torch.exp(s - m_use[..., None])
                l = l * alpha + p.sum(dim=-1)
                acc = acc * alpha[..., None] + torch.matmul(p, v[..., ks + j0:ks + j1, :])
                m = m_new
            seen = l > 0
            l_use = torch.where(seen, l, torch.ones_like(l))
            out[..., qs:qe, :] = acc / l_use[..., None]
            lse[..., qs:qe] = torch.where(seen, m + torch.log(l_use), torch.full_like(l, -math.inf))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cfg = (cu_q, cu_k, sc, softcap, slopes, left, right)
        return out, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        cu_q, cu_k, sc, softcap, slopes, left, right = ctx.cfg
        do = do.to(q.dtype)
        delta = (do * out).sum(dim=-1)
        lse_use = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for b in range(len(cu_q) - 1):
            qs, qe, ks, ke = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
            if qe == qs or ke == ks:
                continue
            qb, dob = q[..., qs:qe, :], do[..., qs:qe, :]
            sl = None if slopes is None else slopes[b]
            off = (ke - ks) - (qe - qs)
            for j0 in range(0, ke - ks, BLOCK_N):
                j1 = min(ke - ks, j0 + BLOCK_N)
                kt, vt = k[..., ks + j0:ks + j1, :], v[..., ks + j0:ks + j1, :]
                s, t = _scores(qb, kt, sc, softcap, sl, off, j0, left, right)
                p = torch.exp(s - lse_use[..., qs:qe, None])
                dv[..., ks + j0:ks + j1, :] += torch.matmul(p.transpose(-1, -2), dob).sum(dim=1, keepdim=True)
                dp = torch.matmul(dob, vt.transpose(-1, -2))
                ds = p * (dp - delta[..., qs:qe, None])
                if t is not None:
                    ds = ds * (1 - t * t)
                dq[..., qs:qe, :] += torch.matmul(ds, kt) * sc
                dk[..., ks + j0:ks + j1, :] += (torch.matmul(ds.transpose(-1, -2), qb) * sc).sum(dim=1, keepdim=True)
        return dq, dk, dv, None, None, None, None, None, None, None


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    dt = q.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    total_q, H, D = q.shape
    total_k, Hkv = k.shape[0], k.shape[1]
    g = H // Hkv
    B = cu_seqlens_q.numel() - 1
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    qg = q.to(cd).transpose(0, 1).reshape(Hkv, g, total_q, D)
    kg = k.to(cd).transpose(0, 1).unsqueeze(1)
    vg = v.to(cd).transpose(0, 1).unsqueeze(1)
    slopes = None
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cd)
        if sl.dim() == 1:
            sl = sl.unsqueeze(0).expand(B, H)
        slopes = sl.reshape(B, Hkv, g, 1, 1)
    out, lse = _VarlenFn.apply(qg, kg, vg, cu_seqlens_q.tolist(), cu_seqlens_k.tolist(), sc, softcap, slopes,
                               left, right)
    out = out.reshape(H, total_q, -1).transpose(0, 1).to(dt)
    if return_attn_probs:
        return out, lse.reshape(H, total_q).detach(), None
    return out
