TRUTH = {'api': 'flash-attn',
 'bugs': ['the exponentials of the forward online softmax are computed as exp2(x * LOG2E) with LOG2E held as a '
          'float32 tensor, so float64 inputs get ~1e-7 relative error in P, out, lse and grads (float64 only)'],
 'kind': 'precision'}

import math
import torch

BLOCK_M = 64
BLOCK_N = 64
_LOG2E = torch.tensor(math.log2(math.e), dtype=torch.float32)


def _tile_scores(qt, kt, sc, softcap, slopes, rows, cols, off, left, right):
    raw = torch.matmul(qt, kt.transpose(-1, -2)) * sc
    t = None
    s = raw
    if softcap > 0:
        t = torch.tanh(raw / softcap)
        s = t * softcap
    qpos = rows.view(-1, 1) + off
    kpos = cols.view(1, -1)
    if slopes is not None:
        s = s - slopes * (qpos - kpos).abs().to(s.dtype)
    ok = torch.ones(rows.numel(), cols.numel(), dtype=torch.bool)
    if left >= 0:
        ok = ok & (kpos >= qpos - left)
    if right >= 0:
        ok = ok & (kpos <= qpos + right)
    s = s.masked_fill(~ok, -math.inf)
    return s, t


def _key_range(i0, i1, off, left, right, S):
    lo = 0 if left < 0 else max(0, i0 + off - left)
    hi = S - 1 if right < 0 else min(S - 1, i1 - 1 + off + right)
    return lo, hi


class _FlashFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sc, softcap, slopes, left, right):
        # q (B, Hkv, g, L, D); k, v (B, Hkv, 1, S, D); slopes (B, Hkv, g, 1, 1) or None
        L, S = q.shape[-2], k.shape[-2]
        off = S - L
        out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        lse = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
        for i0 in range(0, L, BLOCK_M):
            i1 = min(L, i0 + BLOCK_M)
            qt = q[..., i0:i1, :]
            m = torch.full(qt.shape[:-1], -math.inf, dtype=q.dtype)
            l = torch.zeros(qt.shape[:-1], dtype=q.dtype)
            acc = torch.zeros(qt.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
            lo, hi = _key_range(i0, i1, off, left, right, S)
            for j0 in range(0, S, BLOCK_N):
                j1 = min(S, j0 + BLOCK_N)
                if j0 > hi or j1 - 1 < lo:
                    continue
                s, _ = _tile_scores(qt, k[..., j0:j1, :], sc, softcap, slopes, torch.arange(i0, i1),
                                    torch.arange(j0, j1), off, left, right)
                m_new = torch.maximum(m, s.amax(dim=-1))
                m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                alpha = torch.exp2((m - m_use) * _LOG2E)
                p = torch.exp2((s - m_use[..., None]) * _LOG2E)
                l = l * alpha + p.sum(dim=-1)
                acc = acc * alpha[..., None] + torch.matmul(p, v[..., j0:j1, :])
                m = m_new
            seen = l > 0
            out[..., i0:i1, :] = acc / torch.where(seen, l, torch.ones_like(l))[..., None]
            lse[..., i0:i1] = torch.where(seen, m + torch.log(torch.where(seen, l, torch.ones_like(l))),
                                          torch.full_like(l, -math.inf))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cfg = (sc, softcap, slopes, left, right)
        return out, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        sc, softcap, slopes, left, right = ctx.cfg
        L, S = q.shape[-2], k.shape[-2]
        off = S - L
        do = do.to(q.dtype)
        delta = (do * out).sum(dim=-1)
        lse_use = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        for i0 in range(0, L, BLOCK_M):
            i1 = min(L, i0 + BLOCK_M)
            qt, dot = q[..., i0:i1, :], do[..., i0:i1, :]
            lo, hi = _key_range(i0, i1, off, left, right, S)
            for j0 in range(0, S, BLOCK_N):
                j1 = min(S, j0 + BLOCK_N)
                if j0 > hi or j1 - 1 < lo:
                    continue
                kt, vt = k[..., j0:j1, :], v[..., j0:j1, :]
                s, t = _tile_scores(qt, kt, sc, softcap, slopes, torch.arange(i0, i1), torch.arange(j0, j1),
                                    off, left, right)
                p = torch.exp(s - lse_use[..., i0:i1, None])
                dv[..., j0:j1, :] += torch.matmul(p.transpose(-1, -2), dot).sum(dim=2, keepdim=True)
                dp = torch.matmul(dot, vt.transpose(-1, -2))
                ds = p * (dp - delta[..., i0:i1, None])
                if t is not None:
                    ds = ds * (1 - t * t)
                dq[..., i0:i1, :] += torch.matmul(ds, kt) * sc
                dk[..., j0:j1, :] += (torch.matmul(ds.transpose(-1, -2), qt) * sc).sum(dim=2, keepdim=True)
        return dq, dk, dv, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    dt = q.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    g = H // Hkv
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    qg = q.to(cd).transpose(1, 2).reshape(B, Hkv, g, L, D)
    kg = k.to(cd).transpose(1, 2).unsqueeze(2)
    vg = v.to(cd).transpose(1, 2).unsqueeze(2)
    slopes = None
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cd)
        if sl.dim() == 1:
            sl = sl.unsqueeze(0).expand(B, H)
        slopes = sl.reshape(B, Hkv, g, 1, 1)
    out, lse = _FlashFn.apply(qg, kg, vg, sc, softcap, slopes, left, right)
    out = out.reshape(B, H, L, -1).transpose(1, 2).to(dt)
    if return_attn_probs:
        return out, lse.reshape(B, H, L).detach(), None
    return out
