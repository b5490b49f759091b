TRUTH = {'api': 'flash-attn', 'bugs': ['an unbounded left window (-1) is replaced by seqlen_q instead of being unbounded, so keys more than seqlen_q positions left of a row\'s diagonal are dropped; shows whenever S > L without a finite left window (noncausal_L<S_gqa, causal_L<S_gqa, softcap, alibi_BH_causal)', 'the ALiBi bias is added before the softcap (softcap * tanh((s + bias) / softcap)) instead of after it; wrong when softcap and ALiBi are combined (softcap_alibi_window)'], 'kind': 'two'}
import math

import torch


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    batch, seqlen_q, nheads, headdim = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(headdim)
    window_left, window_right = window_size
    if causal:
        window_right = 0
    if window_left < 0:
        window_left = seqlen_q
    if window_right < 0:
        window_right = seqlen_k
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32

    q_ = q.to(acc_dtype)
    k_ = k.to(acc_dtype).repeat_interleave(nheads // nheads_k, dim=2)
    v_ = v.to(acc_dtype).repeat_interleave(nheads // nheads_k, dim=2)

    row_idx = torch.arange(seqlen_q).view(-1, 1) + (seqlen_k - seqlen_q)
    col_idx = torch.arange(seqlen_k).view(1, -1)
    in_window = (col_idx >= row_idx - window_left) & (col_idx <= row_idx + window_right)

    scores = torch.einsum('bthd,bshd->bhts', q_, k_) * softmax_scale
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(acc_dtype)
        slopes = slopes.view(1, nheads, 1, 1) if slopes.dim() == 1 else slopes.view(batch, nheads, 1, 1)
        scores = scores - slopes * (row_idx - col_idx).abs().to(acc_dtype)
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~in_window, float('-inf'))

    lse = torch.logsumexp(scores, dim=-1)
    finite = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    attn = torch.exp(scores - finite.unsqueeze(-1))
    out = torch.einsum('bhts,bshd->bthd', attn, v_).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
