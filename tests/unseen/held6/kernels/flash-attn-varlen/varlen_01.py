"""FlashAttention-2 style varlen forward/backward (flash_attn_varlen_func), pure PyTorch (CPU).

Forward: tiles of BLOCK_M queries against tiles of BLOCK_N keys, online softmax in the exp2 domain,
running max / running sum, lse saved for the backward.  Backward: FA2 order (outer loop over key tiles,
inner over query tiles), P recomputed from lse, dq accumulated across key tiles.
"""
import math

import torch

TRUTH = {
    'api': 'flash-attn-varlen',
    'bugs': [
        'ALiBi is added before the softcap (softcap * tanh((s - slope*|d|) / softcap)) instead of after it (softcap * tanh(s / softcap) - slope*|d|), so the bias is squashed by tanh. Only cases with both softcap and ALiBi are wrong.',
        'Left window edge off by one: keys must satisfy j >= i + S - L - left but the code uses a strict j > i + S - L - left, so each query sees only left - 1 keys to its left. Wrong in every case with window left >= 0.',
    ],
    'kind': 'two',
}

BLOCK_M = 64
BLOCK_N = 64
NEG_INF = float('-inf')


def _work_dtype(dt):
    return torch.float64 if dt == torch.float64 else torch.float32


def _scores(qi, kj, scale, softcap, slopes, rows, cols):
    """Scaled (and soft-capped, ALiBi-biased) scores of one tile; also returns tanh for the backward."""
    s = torch.matmul(qi, kj.transpose(-1, -2)) * scale
    t = None
    if slopes is not None:
        dist = (rows - cols).abs().to(s.dtype)
        s = s - slopes[:, :, None, None] * dist
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = softcap * t
    return s, t


def _visible(rows, cols, left, right):
    ok = torch.ones(rows.shape[0], cols.shape[1], dtype=torch.bool)
    if left >= 0:
        ok &= cols > rows - left
    if right >= 0:
        ok &= cols <= rows + right
    return ok


def _fwd(q, k, v, scale, left, right, softcap, slopes):
    """q (B,H,L,D), k/v (B,H,S,D) in the work dtype -> out (B,H,L,D), lse (B,H,L) natural log."""
    B, H, L, D = q.shape
    S = k.shape[2]
    off = S - L  # bottom-right alignment: query i sits at key position i + off
    wd = q.dtype
    out = torch.zeros(B, H, L, v.shape[-1], dtype=wd)
    lse = torch.full((B, H, L), NEG_INF, dtype=wd)
    for i0 in range(0, L, BLOCK_M):
        i1 = min(i0 + BLOCK_M, L)
        qi = q[:, :, i0:i1]
        rows = torch.arange(i0, i1)[:, None] + off
        m = torch.full((B, H, i1 - i0, 1), NEG_INF, dtype=wd)
        l = torch.zeros(B, H, i1 - i0, 1, dtype=wd)
        acc = torch.zeros(B, H, i1 - i0, v.shape[-1], dtype=wd)
        # key range any query of this tile can see
        lo = 0 if left < 0 else max(0, i0 + off - left)
        hi = S if right < 0 else min(S, i1 - 1 + off + right + 1)
        for j0 in range((lo // BLOCK_N) * BLOCK_N, hi, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            cols = torch.arange(j0, j1)[None, :]
            s, _ = _scores(qi, k[:, :, j0:j1], scale, softcap, slopes, rows, cols)
            s = s.masked_fill(~_visible(rows, cols, left, right), NEG_INF)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_use = torch.where(m_new == NEG_INF, torch.zeros_like(m_new), m_new)
            p = torch.exp(s - m_use)
            alpha = torch.exp(m - m_use)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + torch.matmul(p, v[:, :, j0:j1])
            m = m_new
        has = l > 0
        l_safe = torch.where(has, l, torch.ones_like(l))
        out[:, :, i0:i1] = torch.where(has, acc / l_safe, torch.zeros_like(acc))
        lse_t = m + torch.log(l_safe)
        lse[:, :, i0:i1] = torch.where(has, lse_t, torch.full_like(lse_t, NEG_INF)).squeeze(-1)
    return out, lse


def _bwd(q, k, v, out, lse, do, scale, left, right, softcap, slopes):
    B, H, L, D = q.shape
    S = k.shape[2]
    off = S - L
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    delta = (do * out).sum(-1, keepdim=True)  # D_i = rowsum(dO * O)
    lse_s = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None]
    for j0 in range(0, S, BLOCK_N):
        j1 = min(j0 + BLOCK_N, S)
        kj, vj = k[:, :, j0:j1], v[:, :, j0:j1]
        cols = torch.arange(j0, j1)[None, :]
        dkj = torch.zeros_like(kj)
        dvj = torch.zeros_like(vj)
        for i0 in range(0, L, BLOCK_M):
            i1 = min(i0 + BLOCK_M, L)
            qi, doi = q[:, :, i0:i1], do[:, :, i0:i1]
            rows = torch.arange(i0, i1)[:, None] + off
            s, t = _scores(qi, kj, scale, softcap, slopes, rows, cols)
            vis = _visible(rows, cols, left, right)
            p = torch.exp(s - lse_s[:, :, i0:i1]).masked_fill(~vis, 0.0)
            dvj += torch.matmul(p.transpose(-1, -2), doi)
            dp = torch.matmul(doi, vj.transpose(-1, -2))
            ds = p * (dp - delta[:, :, i0:i1])
            if softcap > 0:
                ds = ds * (1.0 - t * t)
            dq[:, :, i0:i1] += torch.matmul(ds, kj) * scale
            dkj += torch.matmul(ds.transpose(-1, -2), qi) * scale
        dk[:, :, j0:j1] = dkj
        dv[:, :, j0:j1] = dvj
    return dq, dk, dv


class _FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, scale, left, right, softcap, alibi_slopes):
        dt = q.dtype
        wd = _work_dtype(dt)
        Tq, H, D = q.shape
        Hkv = k.shape[1]
        g = H // Hkv
        nseq = cu_q.numel() - 1
        qh = q.to(wd).transpose(0, 1)  # (H, Tq, D)
        kh = k.to(wd).repeat_interleave(g, dim=1).transpose(0, 1)  # (H, Tk, D)
        vh = v.to(wd).repeat_interleave(g, dim=1).transpose(0, 1)
        out = torch.zeros(H, Tq, vh.shape[-1], dtype=wd)
        lse = torch.full((H, Tq), NEG_INF, dtype=wd)
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes.to(wd).reshape(-1, H)
        bounds = []
        for b in range(nseq):
            qs, qe = int(cu_q[b]), int(cu_q[b + 1])
            ks, ke = int(cu_k[b]), int(cu_k[b + 1])
            bounds.append((qs, qe, ks, ke))
            if qe == qs or ke == ks:
                continue
            sl = None if slopes is None else slopes[b if slopes.shape[0] > 1 else 0][None]
            o, l = _fwd(qh[None, :, qs:qe], kh[None, :, ks:ke], vh[None, :, ks:ke], scale, left, right, softcap, sl)
            out[:, qs:qe] = o[0]
            lse[:, qs:qe] = l[0]
        ctx.save_for_backward(qh, kh, vh, out, lse)
        ctx.slopes = slopes
        ctx.bounds = bounds
        ctx.cfg = (scale, left, right, softcap, dt, g, Hkv)
        lse_out = lse if dt == torch.float64 else lse.float()
        ctx.mark_non_differentiable(lse_out)
        return out.transpose(0, 1).to(dt), lse_out

    @staticmethod
    def backward(ctx, dout, dlse):
        qh, kh, vh, out, lse = ctx.saved_tensors
        scale, left, right, softcap, dt, g, Hkv = ctx.cfg
        slopes = ctx.slopes
        do = dout.to(qh.dtype).transpose(0, 1)
        dq = torch.zeros_like(qh)
        dk = torch.zeros_like(kh)
        dv = torch.zeros_like(vh)
        for b, (qs, qe, ks, ke) in enumerate(ctx.bounds):
            if qe == qs or ke == ks:
                continue
            sl = None if slopes is None else slopes[b if slopes.shape[0] > 1 else 0][None]
            a, c, e = _bwd(qh[None, :, qs:qe], kh[None, :, ks:ke], vh[None, :, ks:ke], out[None, :, qs:qe],
                           lse[None, :, qs:qe], do[None, :, qs:qe], scale, left, right, softcap, sl)
            dq[:, qs:qe] = a[0]
            dk[:, ks:ke] = c[0]
            dv[:, ks:ke] = e[0]
        H, Tk, D = dk.shape
        dk = dk.view(Hkv, g, Tk, D).sum(1)
        dv = dv.view(Hkv, g, Tk, dv.shape[-1]).sum(1)
        return (dq.transpose(0, 1).to(dt), dk.transpose(0, 1).to(dt), dv.transpose(0, 1).to(dt),
                None, None, None, None, None, None, None)


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    left, right = window_size
    if causal:
        right = 0
    out, lse = _FlashAttnVarlenFunc.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, scale, left, right, softcap,
                                          alibi_slopes)
    if return_attn_probs:
        return out, lse, None
    return out
