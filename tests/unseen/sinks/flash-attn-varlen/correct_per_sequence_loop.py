"""flash_attn_varlen_func with a per-head learnable sink: one dense softmax per packed sequence, sink as extra column.

Each sequence gets its own bottom-right diagonal, window, soft-cap and ALiBi; a sequence with no keys (or a row that
sees none) puts all its weight on the sink: output 0, lse = sink.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [],
    "kind": "correct",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("no dropout in this kernel")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    group = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(total_q, H, v.shape[-1], dtype=cdt, device=q.device)
    lse = torch.full((H, total_q), float("-inf"), dtype=cdt, device=q.device)
    cq = cu_seqlens_q.tolist()
    ck = cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        L, S = q1 - q0, k1 - k0
        if L == 0:
            continue
        qb = q[q0:q1].to(cdt).transpose(0, 1)  # H L D
        kb = k[k0:k1].to(cdt).transpose(0, 1).repeat_interleave(group, dim=0)
        vb = v[k0:k1].to(cdt).transpose(0, 1).repeat_interleave(group, dim=0)
        s = torch.matmul(qb, kb.transpose(-2, -1)) * scale  # H L S
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(L, device=q.device).view(-1, 1)
        j = torch.arange(S, device=q.device).view(1, -1)
        diag = i + S - L
        if alibi_slopes is not None:
            sl = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            s = s - sl.to(cdt).view(H, 1, 1) * (diag - j).abs().to(cdt)
        ok = torch.ones(L, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= j >= diag - left
        if right >= 0:
            ok &= j <= diag + right
        s = s.masked_fill(~ok, float("-inf"))
        if learnable_sink is not None:
            sink_col = learnable_sink.to(cdt).view(H, 1, 1).expand(H, L, 1)
        else:
            sink_col = torch.full((H, L, 1), float("-inf"), dtype=cdt, device=q.device)
        both = torch.cat([s, sink_col], dim=-1)
        row_lse = torch.logsumexp(both, dim=-1)  # H L
        safe = torch.where(torch.isneginf(row_lse), torch.zeros_like(row_lse), row_lse)
        p = torch.exp(s - safe.unsqueeze(-1))
        out[q0:q1] = torch.matmul(p, vb).transpose(0, 1)
        lse[:, q0:q1] = row_lse
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
