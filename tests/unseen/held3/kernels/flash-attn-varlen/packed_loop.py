"""Varlen flash attention: loops over the packed sequences and runs a dense bottom-right-aligned attention per sequence."""
import math

import torch

TRUTH = {"api": "flash-attn-varlen", "bugs": [], "kind": "correct"}


def _one_sequence(q, k, v, scale, causal, window, softcap, slopes, ct):
    """q (Lq, H, D), k/v (Lk, Hkv, D) -> out (Lq, H, Dv) in ct, lse (H, Lq) float32."""
    Lq, H, _ = q.shape
    Lk, Hkv, _ = k.shape
    rep = H // Hkv
    qh = q.to(ct).transpose(0, 1)
    kh = k.to(ct).transpose(0, 1).repeat_interleave(rep, dim=0)
    vh = v.to(ct).transpose(0, 1).repeat_interleave(rep, dim=0)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qpos = torch.arange(Lq, device=q.device).view(Lq, 1) + (Lk - Lq)
    kpos = torch.arange(Lk, device=q.device).view(1, Lk)
    if slopes is not None:
        s = s - slopes.to(ct).reshape(H, 1, 1) * (qpos - kpos).abs().to(ct)
    left, right = window
    if causal:
        right = 0
    ok = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device)
    if left >= 0:
        ok &= kpos >= qpos - left
    if right >= 0:
        ok &= kpos <= qpos + right
    s = s.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    shift = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    p = torch.exp(s - shift.unsqueeze(-1))
    out = torch.matmul(p, vh).transpose(0, 1)
    return out, lse.float()


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cq = [int(x) for x in cu_seqlens_q.tolist()]
    ck = [int(x) for x in cu_seqlens_k.tolist()]
    out = torch.zeros(total_q, H, v.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((H, total_q), float("-inf"), dtype=torch.float32, device=q.device)
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if q1 == q0:
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
        o_b, l_b = _one_sequence(q[q0:q1], k[k0:k1], v[k0:k1], scale, causal, tuple(window_size), softcap, slopes, ct)
        out[q0:q1] = o_b
        lse[:, q0:q1] = l_b
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
