"""Varlen flash attention per sequence, with the q.k^T product issued as one batched GEMM over heads."""
import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "q and k are cast to a hard-coded torch.bfloat16 for the q.k^T GEMM (and the GEMM result is bfloat16) even for "
        "float32 inputs, so scores carry bfloat16 rounding (~0.4% relative) and float32 outputs/lse are only "
        "bfloat16-accurate; the GEMM should run in the input precision with float32 accumulation/output",
    ],
    "kind": "precision",
}

_GEMM_DTYPE = torch.bfloat16


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    gemm = ft if q.dtype == torch.float64 else _GEMM_DTYPE
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.zeros(total_q, H, v.shape[-1], dtype=ft, device=q.device)
    lse_all = torch.full((H, total_q), float("-inf"), dtype=torch.float32, device=q.device)
    cq = cu_seqlens_q.tolist()
    ck = cu_seqlens_k.tolist()
    left, right = window_size
    if causal:
        right = 0
    for b in range(len(cq) - 1):
        a, e = cq[b], cq[b + 1]
        c, d = ck[b], ck[b + 1]
        if e == a:
            continue
        Lq, Lk = e - a, d - c
        qb = q[a:e].transpose(0, 1).to(gemm)
        kb = k[c:d].transpose(0, 1).repeat_interleave(H // Hkv, dim=0).to(gemm)
        vb = v[c:d].transpose(0, 1).repeat_interleave(H // Hkv, dim=0).to(ft)
        s = torch.matmul(qb, kb.transpose(1, 2)).to(ft) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qp = torch.arange(Lq, device=q.device)[:, None] + (Lk - Lq)
        kp = torch.arange(Lk, device=q.device)[None, :]
        if alibi_slopes is not None:
            sl = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
            s = s - sl.to(ft)[:, None, None] * (qp - kp).abs().to(ft)
        keep = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device)
        if left >= 0:
            keep &= kp >= qp - left
        if right >= 0:
            keep &= kp <= qp + right
        s = s.masked_fill(~keep, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse.nan_to_num(neginf=0.0).unsqueeze(-1))
        out[a:e] = torch.matmul(p, vb).transpose(0, 1)
        lse_all[:, a:e] = lse.float()
    out = out.to(q.dtype)
    return (out, lse_all, None) if return_attn_probs else out
