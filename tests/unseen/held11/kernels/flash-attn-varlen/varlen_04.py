TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['the lse buffer is preallocated with zeros and sequences with zero keys are skipped, so their query rows report lse = 0 instead of -inf (output rows are correctly zero); shows on sequences with queries but no keys (empty_seqs, empty_seqs_causal)'], 'kind': 'semantic'}
import math

import torch


def _sequence(qb, kb, vb, scale, causal, window, softcap, slopes):
    L, S = qb.shape[0], kb.shape[0]
    s = torch.einsum('ihd,jhd->hij', qb, kb) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L)[:, None] + S - L
    j = torch.arange(S)[None, :]
    if slopes is not None:
        s = s - slopes[:, None, None] * (i - j).abs()
    lo, hi = window
    if causal:
        hi = 0
    hidden = torch.zeros(L, S, dtype=torch.bool)
    if lo >= 0:
        hidden |= j < i - lo
    if hi >= 0:
        hidden |= j > i + hi
    s = s.masked_fill(hidden, float('-inf'))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.nan_to_num(lse, neginf=0.0)[..., None])
    return torch.einsum('hij,jhd->ihd', p, vb), lse


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    g = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    cu_q = cu_seqlens_q.tolist()
    cu_k = cu_seqlens_k.tolist()

    out = torch.zeros(total_q, H, D, dtype=work)
    lse = torch.zeros(H, total_q, dtype=work)
    for b in range(len(cu_q) - 1):
        qs, qe, ks, ke = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if qe == qs or ke == ks:
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).to(work)
        o_b, lse_b = _sequence(q[qs:qe].to(work), k[ks:ke].to(work).repeat_interleave(g, 1),
                               v[ks:ke].to(work).repeat_interleave(g, 1), scale, causal, window_size, softcap, slopes)
        out[qs:qe] = o_b
        lse[:, qs:qe] = lse_b
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
