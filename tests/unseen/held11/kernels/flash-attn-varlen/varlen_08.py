TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['softmax_lse is always returned as float32 (lse.float()), which the spec allows only for float32/bfloat16 inputs; for float64 inputs the lse is rounded to float32 (~1e-7 absolute error) on every case with keys'], 'kind': 'precision'}
import math

import torch


def _attn_block(q, k, v, scale, causal, window_size, softcap, slopes):
    L, S = q.shape[0], k.shape[0]
    logits = torch.einsum('qhd,khd->hqk', q, k).mul(scale)
    if softcap > 0:
        logits = logits.div(softcap).tanh().mul(softcap)
    pos_q = torch.arange(L, dtype=torch.long).unsqueeze(-1).add(S - L)
    pos_k = torch.arange(S, dtype=torch.long).unsqueeze(0)
    if slopes is not None:
        logits = logits - slopes.unsqueeze(-1).unsqueeze(-1) * (pos_q - pos_k).abs().to(logits.dtype)
    left, right = window_size
    if causal:
        right = 0
    band = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        band.logical_and_(pos_k >= pos_q - left)
    if right >= 0:
        band.logical_and_(pos_k <= pos_q + right)
    logits = logits.masked_fill(band.logical_not(), -math.inf)
    lse = logits.logsumexp(dim=-1)
    safe = torch.where(lse.isneginf(), torch.zeros_like(lse), lse)
    probs = (logits - safe.unsqueeze(-1)).exp()
    return torch.einsum('hqk,khd->qhd', probs, v), lse


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, nh, hd = q.shape
    nh_k = k.shape[1]
    if softmax_scale is None:
        softmax_scale = hd ** -0.5
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()

    out_parts, lse_parts = [], []
    for b in range(len(starts_q) - 1):
        qa, qb = starts_q[b], starts_q[b + 1]
        ka, kb = starts_k[b], starts_k[b + 1]
        if qb == qa:
            continue
        if kb == ka:
            out_parts.append(q[qa:qb].to(work) * 0)
            lse_parts.append(torch.full((nh, qb - qa), -math.inf, dtype=work))
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).to(work)
        o, l = _attn_block(q[qa:qb].to(work), k[ka:kb].to(work).repeat_interleave(nh // nh_k, 1),
                           v[ka:kb].to(work).repeat_interleave(nh // nh_k, 1), softmax_scale, causal,
                           window_size, softcap, slopes)
        out_parts.append(o)
        lse_parts.append(l)
    out = torch.cat(out_parts).to(q.dtype)
    softmax_lse = torch.cat(lse_parts, dim=1).float()
    if return_attn_probs:
        return out, softmax_lse, None
    return out
