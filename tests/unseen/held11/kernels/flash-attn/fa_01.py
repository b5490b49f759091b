TRUTH = {'api': 'flash-attn', 'bugs': ['with causal=True the window is replaced by (-1, 0), dropping the left window bound; causal + finite left window (window20_causal_L<S, causal_window30_10) attends to all earlier keys instead of only the last `left` ones'], 'kind': 'semantic'}
import math

import torch


def _local_mask(L, S, window_size):
    left, right = window_size
    q_pos = torch.arange(L).unsqueeze(1) + (S - L)
    k_pos = torch.arange(S).unsqueeze(0)
    ok = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        ok = ok & (k_pos >= q_pos - left)
    if right >= 0:
        ok = ok & (k_pos <= q_pos + right)
    return ok, q_pos, k_pos


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    if softmax_scale is None:
        softmax_scale = d ** -0.5
    if causal:
        window_size = (-1, 0)
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32

    qt = q.to(dt).permute(0, 2, 1, 3)
    kt = k.to(dt).permute(0, 2, 3, 1)
    vt = v.to(dt).permute(0, 2, 1, 3)
    if nheads_k != nheads:
        kt = kt.repeat_interleave(nheads // nheads_k, dim=1)
        vt = vt.repeat_interleave(nheads // nheads_k, dim=1)

    scores = torch.matmul(qt, kt) * softmax_scale
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    ok, q_pos, k_pos = _local_mask(seqlen_q, seqlen_k, window_size)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(dt).reshape(-1, nheads, 1, 1)
        scores = scores - slopes * (q_pos - k_pos).abs().to(dt)
    scores = scores.masked_fill(~ok, float('-inf'))

    lse = torch.logsumexp(scores, dim=-1)
    lse_safe = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    probs = torch.exp(scores - lse_safe.unsqueeze(-1))
    out = torch.matmul(probs, vt).permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
