TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['the hand-written backward loops over query tiles of BLOCK_M rows inside each sequence and stores each tile\'s dK/dV contribution with `=` instead of accumulating, so only the last query tile\'s contribution survives; dk and dv are wrong for every sequence with more than BLOCK_M = 64 queries and at least one key (plain, causal_eq, noncausal_mixed, window16_8_gqa, softcap_alibiH, alibiBH_causal, causal_L>S, causal_window20_5, big); forward and dq are right'], 'kind': 'semantic'}
import math

import torch

BLOCK_M = 64


def _mask_and_bias(L, S, causal, window_size, slopes, dtype):
    i = torch.arange(L).view(L, 1) + (S - L)
    j = torch.arange(S).view(1, S)
    left, right = window_size
    if causal:
        right = 0
    keep = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    bias = None
    if slopes is not None:
        bias = -slopes.to(dtype).view(-1, 1, 1) * (i - j).abs().to(dtype)
    return keep, bias


def _scores(q, k, scale, softcap, keep, bias):
    raw = torch.einsum('qhd,khd->hqk', q, k) * scale
    s = softcap * torch.tanh(raw / softcap) if softcap > 0 else raw
    if bias is not None:
        s = s + bias
    return raw, s.masked_fill(~keep, float('-inf'))


class _VarlenAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, scale, causal, window_size, softcap, alibi_slopes):
        H, Hkv = q.shape[1], k.shape[1]
        g = H // Hkv
        out = torch.zeros_like(q)
        lse = torch.full((H, q.shape[0]), float('-inf'), dtype=q.dtype)
        for b in range(cu_q.numel() - 1):
            qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
            if qe == qs or ke == ks:
                continue
            slopes = None if alibi_slopes is None else (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b])
            keep, bias = _mask_and_bias(qe - qs, ke - ks, causal, window_size, slopes, q.dtype)
            kb = k[ks:ke].repeat_interleave(g, 1)
            vb = v[ks:ke].repeat_interleave(g, 1)
            _, s = _scores(q[qs:qe], kb, scale, softcap, keep, bias)
            m = s.amax(-1, keepdim=True)
            m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
            e = torch.exp(s - m)
            l = e.sum(-1, keepdim=True)
            out[qs:qe] = torch.einsum('hqk,khd->qhd', e / torch.where(l > 0, l, torch.ones_like(l)), vb)
            lse[:, qs:qe] = (m + torch.log(l)).squeeze(-1)
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, alibi_slopes)
        ctx.cfg = (scale, causal, window_size, softcap)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, cu_q, cu_k, alibi_slopes = ctx.saved_tensors
        scale, causal, window_size, softcap = ctx.cfg
        H, Hkv = q.shape[1], k.shape[1]
        g = H // Hkv
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        for b in range(cu_q.numel() - 1):
            qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
            if qe == qs or ke == ks:
                continue
            slopes = None if alibi_slopes is None else (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b])
            keep, bias = _mask_and_bias(qe - qs, ke - ks, causal, window_size, slopes, q.dtype)
            kb = k[ks:ke].repeat_interleave(g, 1)
            vb = v[ks:ke].repeat_interleave(g, 1)
            for m0 in range(0, qe - qs, BLOCK_M):
                m1 = min(m0 + BLOCK_M, qe - qs)
                rows = slice(qs + m0, qs + m1)
                raw, s = _scores(q[rows], kb, scale, softcap, keep[m0:m1],
                                 None if bias is None else bias[:, m0:m1])
                l_ = lse[:, rows].unsqueeze(-1)
                p = torch.exp(s - torch.where(torch.isneginf(l_), torch.zeros_like(l_), l_))
                do = dout[rows]
                dvb = torch.einsum('hqk,qhd->khd', p, do)
                dp = torch.einsum('qhd,khd->hqk', do, vb)
                delta = (do * out[rows]).sum(-1).transpose(0, 1).unsqueeze(-1)
                ds = p * (dp - delta)
                if softcap > 0:
                    ds = ds * (1 - torch.tanh(raw / softcap) ** 2)
                dq[rows] = torch.einsum('hqk,khd->qhd', ds, kb) * scale
                dkb = torch.einsum('hqk,qhd->khd', ds, q[rows]) * scale
                dk[ks:ke] = dkb.view(ke - ks, Hkv, g, -1).sum(2)
                dv[ks:ke] = dvb.view(ke - ks, Hkv, g, -1).sum(2)
        return dq, dk, dv, None, None, None, None, None, None, None


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    D = q.shape[-1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    out, lse = _VarlenAttn.apply(q.to(ct), k.to(ct), v.to(ct), cu_seqlens_q, cu_seqlens_k, scale, causal,
                                 tuple(window_size), softcap, alibi_slopes)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
