TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['with softcap > 0 the cap is applied to the unscaled product and the softmax scale afterwards (scale * softcap * tanh(qk / softcap)) instead of softcap * tanh(scale * qk / softcap); wrong on every softcap case (softcap_alibiH, softcap_causal_L<S); without softcap it is right'], 'kind': 'semantic'}
import math

import torch

BLOCK_N = 32


def _logits(qb, kb, scale, softcap):
    raw = torch.einsum('hld,hsd->hls', qb, kb)
    if softcap > 0:
        return softcap * torch.tanh(raw / softcap) * scale
    return raw * scale


def _one_sequence(qb, kb, vb, scale, causal, window, softcap, slopes):
    # qb: (H, L, D); kb, vb: (H, S, D)
    H, L, D = qb.shape
    S = kb.shape[1]
    left, right = window
    if causal:
        right = 0
    rows = torch.arange(L).view(L, 1) + (S - L)
    m = torch.full((H, L, 1), float('-inf'), dtype=qb.dtype)
    l = torch.zeros(H, L, 1, dtype=qb.dtype)
    acc = torch.zeros(H, L, D, dtype=qb.dtype)
    for n0 in range(0, S, BLOCK_N):
        n1 = min(n0 + BLOCK_N, S)
        cols = torch.arange(n0, n1).view(1, -1)
        s = _logits(qb, kb[:, n0:n1], scale, softcap)
        if slopes is not None:
            s = s - slopes.view(H, 1, 1) * (rows - cols).abs().to(s.dtype)
        ok = torch.ones(L, n1 - n0, dtype=torch.bool)
        if left >= 0:
            ok &= cols >= rows - left
        if right >= 0:
            ok &= cols <= rows + right
        s = s.masked_fill(~ok, float('-inf'))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        base = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        scale_prev = torch.exp(m - base)
        p = torch.exp(s - base)
        l = l * scale_prev + p.sum(-1, keepdim=True)
        acc = acc * scale_prev + torch.matmul(p, vb[:, n0:n1])
        m = m_new
    o = acc / torch.where(l > 0, l, torch.ones_like(l))
    base = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    return o.transpose(0, 1), (base + torch.log(l)).squeeze(-1)


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    outs, lses = [], []
    for b in range(cu_seqlens_q.numel() - 1):
        qs, qe = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ks, ke = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        L, S = qe - qs, ke - ks
        if L == 0:
            continue
        if S == 0:
            outs.append(torch.zeros(L, H, D, dtype=ct) + 0.0 * q[qs:qe].to(ct))
            lses.append(torch.full((H, L), float('-inf'), dtype=ct))
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).to(ct)
        qb = q[qs:qe].to(ct).transpose(0, 1)
        kb = k[ks:ke].to(ct).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        vb = v[ks:ke].to(ct).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        o, l = _one_sequence(qb, kb, vb, scale, causal, window_size, softcap, slopes)
        outs.append(o)
        lses.append(l)
    out = torch.cat(outs, 0).to(q.dtype)
    lse = torch.cat(lses, 1)
    if return_attn_probs:
        return out, lse, None
    return out
