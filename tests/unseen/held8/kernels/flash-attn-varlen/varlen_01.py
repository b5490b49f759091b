TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "custom backward uses the raw lse (not -inf -> 0) for rows that see no key, exp(-inf - -inf) = NaN; forward right, gradients NaN when some query row has no key (empty sequences, causal L > S)"
    ],
    "kind": "semantic"
}

import math
import torch

BLOCK_M = 32
BLOCK_N = 32


def _tile_scores(qi, kj, sc, softcap, slope, i0, j0, L, S, left, right):
    s = torch.matmul(qi, kj.transpose(-1, -2)) * sc
    t = None
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = softcap * t
    ii = torch.arange(i0, i0 + qi.shape[-2])[:, None] + (S - L)
    jj = torch.arange(j0, j0 + kj.shape[-2])[None, :]
    if slope is not None:
        s = s - slope[..., None, None] * (ii - jj).abs().to(s.dtype)
    ok = torch.ones_like(s, dtype=torch.bool)
    if left >= 0:
        ok = ok & (jj >= ii - left)
    if right >= 0:
        ok = ok & (jj <= ii + right)
    s = s.masked_fill(~ok, float('-inf'))
    return s, t


class _FlashFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sc, softcap, slopes, left, right):
        B, H, L, D = q.shape
        S = k.shape[2]
        o = torch.zeros_like(q)
        lse = torch.full((B, H, L), float('-inf'), dtype=q.dtype)
        for i0 in range(0, L, BLOCK_M):
            i1 = min(i0 + BLOCK_M, L)
            qi = q[:, :, i0:i1]
            m_i = torch.full((B, H, i1 - i0), float('-inf'), dtype=q.dtype)
            l_i = torch.zeros(B, H, i1 - i0, dtype=q.dtype)
            acc = torch.zeros(B, H, i1 - i0, D, dtype=q.dtype)
            for j0 in range(0, S, BLOCK_N):
                j1 = min(j0 + BLOCK_N, S)
                s, _ = _tile_scores(qi, k[:, :, j0:j1], sc, softcap, slopes, i0, j0, L, S, left, right)
                m_new = torch.maximum(m_i, s.amax(-1))
                m_use = torch.where(m_new == float('-inf'), torch.zeros_like(m_new), m_new)
                p = torch.exp(s - m_use[..., None])
                corr = torch.exp(m_i - m_use)
                l_i = l_i * corr + p.sum(-1)
                acc = acc * corr[..., None] + torch.matmul(p, v[:, :, j0:j1])
                m_i = m_new
            good = l_i > 0
            l_safe = torch.where(good, l_i, torch.ones_like(l_i))
            o[:, :, i0:i1] = acc / l_safe[..., None]
            lse[:, :, i0:i1] = torch.where(good, m_i + torch.log(l_safe), torch.full_like(l_i, float('-inf')))
        ctx.save_for_backward(q, k, v, o, lse, slopes if slopes is not None else torch.empty(0))
        ctx.cfg = (sc, softcap, slopes is not None, left, right)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse, slopes = ctx.saved_tensors
        sc, softcap, has_sl, left, right = ctx.cfg
        slopes = slopes if has_sl else None
        B, H, L, D = q.shape
        S = k.shape[2]
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        Di = (do * o).sum(-1)
        lse_s = lse
        for j0 in range(0, S, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            kj, vj = k[:, :, j0:j1], v[:, :, j0:j1]
            for i0 in range(0, L, BLOCK_M):
                i1 = min(i0 + BLOCK_M, L)
                qi = q[:, :, i0:i1]
                s, t = _tile_scores(qi, kj, sc, softcap, slopes, i0, j0, L, S, left, right)
                p = torch.exp(s - lse_s[:, :, i0:i1, None])
                doi = do[:, :, i0:i1]
                dv[:, :, j0:j1] += torch.matmul(p.transpose(-1, -2), doi)
                dp = torch.matmul(doi, vj.transpose(-1, -2))
                ds = p * (dp - Di[:, :, i0:i1, None])
                if t is not None:
                    ds = ds * (1 - t * t)
                dq[:, :, i0:i1] += sc * torch.matmul(ds, kj)
                dk[:, :, j0:j1] += sc * torch.matmul(ds.transpose(-1, -2), qi)
        return dq, dk, dv, None, None, None, None, None


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0
    qc = q.to(cdt).transpose(0, 1)
    kc = k.to(cdt).transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
    vc = v.to(cdt).transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
    out = torch.zeros(H, total_q, D, dtype=cdt)
    lse = torch.full((H, total_q), float('-inf'), dtype=cdt)
    nseq = cu_seqlens_q.numel() - 1
    for b in range(nseq):
        qs, qe = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ks, ke = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if qe == qs:
            continue
        slopes = None
        if alibi_slopes is not None:
            sl = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            slopes = sl.to(cdt)[None]
        o, l = _FlashFn.apply(qc[None, :, qs:qe], kc[None, :, ks:ke], vc[None, :, ks:ke], sc, softcap, slopes,
                              left, right)
        out = torch.cat([out[:, :qs], o[0], out[:, qe:]], dim=1)
        lse = torch.cat([lse[:, :qs], l[0], lse[:, qe:]], dim=1)
    out = out.transpose(0, 1).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
