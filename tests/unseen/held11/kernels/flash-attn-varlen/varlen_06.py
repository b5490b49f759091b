TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['query and key positions are taken from their packed (global) row indices, so the causal/window diagonal and the ALiBi distance of sequence b are shifted by cu_seqlens_q[b] - cu_seqlens_k[b]; wrong for every sequence whose query and key offsets differ under causal/window/ALiBi (causal_L<S_gqa, causal_L>S, empty_seqs_causal, softcap_alibiH, softcap_causal_L<S, alibiBH_causal)', 'the left window bound is exclusive (k > i + S - L - left) instead of inclusive, so each row loses the key exactly `left` positions before its diagonal (window16_8_gqa, causal_window20_5)'], 'kind': 'two'}
import math

import torch


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, nheads, headdim = q.shape
    nheads_k = k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(headdim)
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    wl, wr = window_size
    if causal:
        wr = 0

    out = torch.zeros(total_q, nheads, headdim, dtype=dt)
    lse = torch.full((nheads, total_q), float('-inf'), dtype=dt)
    batch = cu_seqlens_q.numel() - 1
    for b in range(batch):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if q1 == q0 or k1 == k0:
            continue
        qi = torch.arange(q0, q1).unsqueeze(1) + ((k1 - k0) - (q1 - q0))
        kj = torch.arange(k0, k1).unsqueeze(0)

        qb = q[q0:q1].to(dt).transpose(0, 1)
        kb = k[k0:k1].to(dt).transpose(0, 1).repeat_interleave(nheads // nheads_k, 0)
        vb = v[k0:k1].to(dt).transpose(0, 1).repeat_interleave(nheads // nheads_k, 0)
        s = torch.bmm(qb, kb.transpose(1, 2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if alibi_slopes is not None:
            slope = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            s = s - slope.to(dt).view(-1, 1, 1) * (qi - kj).abs().to(dt)
        valid = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool)
        if wl >= 0:
            valid &= kj > qi - wl
        if wr >= 0:
            valid &= kj <= qi + wr
        s = s.masked_fill(~valid, float('-inf'))
        row_lse = torch.logsumexp(s, dim=-1, keepdim=True)
        p = torch.exp(s - row_lse.nan_to_num(neginf=0.0))
        out[q0:q1] = torch.bmm(p, vb).transpose(0, 1)
        lse[:, q0:q1] = row_lse.squeeze(-1)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
