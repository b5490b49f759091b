TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['the backward computes the softmax-gradient row term delta = rowsum(dO * O) from dO.float() * O.float(), i.e. in float32 even for float64 inputs; ds = P * (dP - delta) then carries float32 rounding and dq/dk are off by ~1e-7 relative on every float64 case (dv, out, lse are exact)'], 'kind': 'precision'}
import math

import torch


def _mask(L, S, causal, window_size):
    r = torch.arange(L).view(L, 1) + (S - L)
    c = torch.arange(S).view(1, S)
    left, right = window_size
    if causal:
        right = 0
    keep = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        keep &= c >= r - left
    if right >= 0:
        keep &= c <= r + right
    return keep, (r - c).abs()


class _SeqAttention(torch.autograd.Function):
    """One packed sequence. q: (L, H, D), k/v: (S, Hkv, D)."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal, window_size, softcap, slopes):
        L, H, D = q.shape
        S, Hkv = k.shape[0], k.shape[1]
        g = H // Hkv
        keep, dist = _mask(L, S, causal, window_size)
        kx = k.repeat_interleave(g, 1)
        vx = v.repeat_interleave(g, 1)
        raw = torch.einsum('lhd,shd->hls', q, kx) * scale
        s = softcap * torch.tanh(raw / softcap) if softcap > 0 else raw
        if slopes is not None:
            s = s - slopes.view(H, 1, 1) * dist.to(s.dtype)
        s = s.masked_fill(~keep, float('-inf'))
        lse = torch.logsumexp(s, -1, keepdim=True)
        p = torch.exp(s - torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse))
        o = torch.einsum('hls,shd->lhd', p, vx)
        ctx.save_for_backward(q, kx, vx, raw, p, o)
        ctx.scale, ctx.softcap, ctx.g = scale, softcap, g
        return o, lse.squeeze(-1)

    @staticmethod
    def backward(ctx, do, dlse):
        q, kx, vx, raw, p, o = ctx.saved_tensors
        scale, softcap, g = ctx.scale, ctx.softcap, ctx.g
        dvx = torch.einsum('hls,lhd->shd', p, do)
        dp = torch.einsum('lhd,shd->hls', do, vx)
        delta = (do.float() * o.float()).sum(-1).transpose(0, 1).unsqueeze(-1)
        ds = p * (dp - delta)
        if softcap > 0:
            ds = ds * (1.0 - torch.tanh(raw / softcap).square())
        dq = torch.einsum('hls,shd->lhd', ds, kx) * scale
        dkx = torch.einsum('hls,lhd->shd', ds, q) * scale
        S, H, D = dkx.shape
        dk = dkx.reshape(S, H // g, g, D).sum(2)
        dv = dvx.reshape(S, H // g, g, D).sum(2)
        return dq, dk, dv, None, None, None, None, None


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    qc, kc, vc = q.to(dt), k.to(dt), v.to(dt)
    outs, lses = [], []
    for b in range(cu_seqlens_q.numel() - 1):
        qs, qe = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ks, ke = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if qe == qs:
            continue
        if ke == ks:
            outs.append(qc[qs:qe] * 0.0)
            lses.append(torch.full((H, qe - qs), float('-inf'), dtype=dt))
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).to(dt)
        o, l = _SeqAttention.apply(qc[qs:qe], kc[ks:ke], vc[ks:ke], scale, causal, tuple(window_size), softcap,
                                   slopes)
        outs.append(o)
        lses.append(l)
    out = torch.cat(outs, 0).to(q.dtype)
    lse = torch.cat(lses, 1).detach()
    if return_attn_probs:
        return out, lse, None
    return out
