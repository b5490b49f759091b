TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['key offsets are tracked with a running counter that is advanced after the "no queries" early `continue`, so a sequence with 0 queries but some keys does not advance it and every later sequence reads the wrong key/value rows (empty_seqs_causal, empty_seqs)', 'slopes are picked per sequence as alibi_slopes[b % alibi_slopes.shape[0]], which is right for (B, H) slopes but for (H,) slopes yields the single scalar slope of head b % H applied to all heads (softcap_alibiH)'], 'kind': 'two'}
import math

import torch


def _flash_core(qh, kh, vh, scale, causal, window_size, softcap, slope):
    L, S = qh.shape[-2], kh.shape[-2]
    s = qh @ kh.transpose(-1, -2) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    r = torch.arange(L).view(L, 1) + (S - L)
    c = torch.arange(S).view(1, S)
    if slope is not None:
        s = s - slope * (r - c).abs().to(s.dtype)
    left, right = window_size
    if causal:
        right = 0
    keep = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        keep = keep & (c >= r - left)
    if right >= 0:
        keep = keep & (c <= r + right)
    s = s.masked_fill(~keep, float('-inf'))
    mx = s.amax(-1, keepdim=True).clamp_min(torch.finfo(s.dtype).min)
    e = torch.exp(s - mx)
    den = e.sum(-1, keepdim=True)
    o = (e @ vh) / den.clamp_min(torch.finfo(s.dtype).tiny)
    return o, (mx + den.log()).squeeze(-1)


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    lens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).tolist()
    lens_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).tolist()

    out_rows, lse_cols = [], []
    q_off = 0
    k_off = 0
    for b, (L, S) in enumerate(zip(lens_q, lens_k)):
        if L == 0:
            continue
        qh = q[q_off:q_off + L].to(f).transpose(0, 1)
        q_off += L
        if S == 0:
            out_rows.append(torch.zeros(L, H, D, dtype=f) + 0 * qh.sum())
            lse_cols.append(torch.full((H, L), float('-inf'), dtype=f))
            continue
        kh = k[k_off:k_off + S].to(f).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        vh = v[k_off:k_off + S].to(f).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        k_off += S
        slope = None
        if alibi_slopes is not None:
            slope = alibi_slopes[b % alibi_slopes.shape[0]].to(f).reshape(-1, 1, 1)
        o, l = _flash_core(qh, kh, vh, scale, causal, window_size, softcap, slope)
        out_rows.append(o.transpose(0, 1))
        lse_cols.append(l)
    out = torch.cat(out_rows, 0).to(q.dtype)
    lse = torch.cat(lse_cols, 1)
    if return_attn_probs:
        return out, lse, None
    return out
