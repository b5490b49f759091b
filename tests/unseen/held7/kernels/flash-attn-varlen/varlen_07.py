import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [],
    "kind": "correct"
}


BQ, BK = 32, 32
NEG = float('-inf')


def _scores(q, k, i0, j0, off, scale, softcap, slope, left, right):
    """q (H, bq, D), k (H, bk, D); query rows start at i0, keys at j0; off = S - L of the sequence."""
    raw = torch.matmul(q, k.transpose(-1, -2)) * scale
    th = None
    s = raw
    if softcap > 0:
        th = torch.tanh(raw / softcap)
        s = th * softcap
    qi = torch.arange(i0, i0 + q.shape[1])[:, None] + off
    kj = torch.arange(j0, j0 + k.shape[1])[None, :]
    if slope is not None:
        s = s - slope[:, None, None] * (qi - kj).abs().to(s.dtype)
    keep = torch.ones(qi.shape[0], kj.shape[1], dtype=torch.bool)
    if left >= 0:
        keep &= kj >= qi - left
    if right >= 0:
        keep &= kj <= qi + right
    return s.masked_fill(~keep, NEG), th


class _Varlen(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cq, ck, scale, left, right, softcap, slopes):
        # q (total_q, H, D), k/v (total_k, Hkv, D) in compute dtype; cq/ck python lists
        tq, H, D = q.shape
        Hkv = k.shape[1]
        g = H // Hkv
        out = torch.zeros(tq, H, v.shape[-1], dtype=q.dtype)
        lse = torch.full((H, tq), NEG, dtype=q.dtype)
        for b in range(len(cq) - 1):
            qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
            L, S = qe - qs, ke - ks
            if L == 0 or S == 0:
                continue
            sl = None if slopes is None else slopes[b]
            qb = q[qs:qe].transpose(0, 1)
            kb = k[ks:ke].transpose(0, 1).repeat_interleave(g, 0)
            vb = v[ks:ke].transpose(0, 1).repeat_interleave(g, 0)
            for i0 in range(0, L, BQ):
                qt = qb[:, i0:i0 + BQ]
                m = qt.new_full((H, qt.shape[1], 1), NEG)
                l = qt.new_zeros((H, qt.shape[1], 1))
                acc = qt.new_zeros((H, qt.shape[1], vb.shape[-1]))
                for j0 in range(0, S, BK):
                    s, _ = _scores(qt, kb[:, j0:j0 + BK], i0, j0, S - L, scale, softcap, sl, left, right)
                    mn = torch.maximum(m, s.amax(-1, keepdim=True))
                    base = torch.where(mn == NEG, torch.zeros_like(mn), mn)
                    p = torch.exp(s - base)
                    c = torch.exp(m - base)
                    l = c * l + p.sum(-1, keepdim=True)
                    acc = c * acc + torch.matmul(p, vb[:, j0:j0 + BK])
                    m = mn
                good = l > 0
                l1 = torch.where(good, l, torch.ones_like(l))
                out[qs + i0:qs + i0 + qt.shape[1]] = (acc / l1).transpose(0, 1)
                lse[:, qs + i0:qs + i0 + qt.shape[1]] = torch.where(good, m + torch.log(l1), torch.full_like(l, NEG))[..., 0]
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cfg = (cq, ck, scale, left, right, softcap, slopes)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        cq, ck, scale, left, right, softcap, slopes = ctx.cfg
        tq, H, D = q.shape
        Hkv = k.shape[1]
        g = H // Hkv
        dout = dout.to(q.dtype)
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        delta_all = (dout * out).sum(-1).transpose(0, 1)          # (H, total_q)
        for b in range(len(cq) - 1):
            qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
            L, S = qe - qs, ke - ks
            if L == 0 or S == 0:
                continue
            sl = None if slopes is None else slopes[b]
            qb = q[qs:qe].transpose(0, 1)
            kb = k[ks:ke].transpose(0, 1).repeat_interleave(g, 0)
            vb = v[ks:ke].transpose(0, 1).repeat_interleave(g, 0)
            dob = dout[qs:qe].transpose(0, 1)
            lb = lse[:, qs:qe, None]
            lb = torch.where(torch.isinf(lb), torch.zeros_like(lb), lb)
            db = delta_all[:, qs:qe, None]
            dkb = torch.zeros_like(kb)
            dvb = torch.zeros_like(vb)
            for j0 in range(0, S, BK):
                kt, vt = kb[:, j0:j0 + BK], vb[:, j0:j0 + BK]
                for i0 in range(0, L, BQ):
                    qt = qb[:, i0:i0 + BQ]
                    s, th = _scores(qt, kt, i0, j0, S - L, scale, softcap, sl, left, right)
                    p = torch.exp(s - lb[:, i0:i0 + BQ])
                    do_t = dob[:, i0:i0 + BQ]
                    dvb[:, j0:j0 + BK] += torch.matmul(p.transpose(-1, -2), do_t)
                    dp = torch.matmul(do_t, vt.transpose(-1, -2))
                    ds = p * (dp - db[:, i0:i0 + BQ])
                    if th is not None:
                        ds = ds * (1 - th * th)
                    ds = ds * scale
                    dq[qs + i0:qs + i0 + qt.shape[1]] += torch.matmul(ds, kt).transpose(0, 1)
                    dkb[:, j0:j0 + BK] += torch.matmul(ds.transpose(-1, -2), qt)
            dk[ks:ke] += dkb.view(Hkv, g, S, D).sum(1).transpose(0, 1)
            dv[ks:ke] += dvb.view(Hkv, g, S, -1).sum(1).transpose(0, 1)
        return dq, dk, dv, None, None, None, None, None, None, None


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    D = q.shape[-1]
    H = q.shape[1]
    nseq = cu_seqlens_q.numel() - 1
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    wdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(wdt)
        slopes = slopes.unsqueeze(0).expand(nseq, H) if slopes.dim() == 1 else slopes
    out, lse = _Varlen.apply(q.to(wdt), k.to(wdt), v.to(wdt), cu_seqlens_q.tolist(), cu_seqlens_k.tolist(), scale,
                             left, right, float(softcap), slopes)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
