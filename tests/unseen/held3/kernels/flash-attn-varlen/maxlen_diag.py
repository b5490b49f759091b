"""Varlen flash attention looping over sequences, with the causal/window diagonal derived once for the whole batch."""
import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the bottom-right diagonal offset for causal masks and windows is computed once as max_seqlen_k - max_seqlen_q "
        "instead of per sequence as len_k[b] - len_q[b], so sequences whose own q/k length difference differs from the "
        "max-length difference get a shifted diagonal",
    ],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    g = H // Hkv
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    offset = int(max_seqlen_k) - int(max_seqlen_q)
    wl, wr = window_size
    if causal:
        wr = 0
    starts_q = cu_seqlens_q.tolist()
    starts_k = cu_seqlens_k.tolist()
    out = q.new_zeros(total_q, H, v.shape[-1], dtype=f)
    lse = torch.full((H, total_q), float("-inf"), device=q.device, dtype=torch.float32)
    for b in range(len(starts_q) - 1):
        qs, qe, ks, ke = starts_q[b], starts_q[b + 1], starts_k[b], starts_k[b + 1]
        Lq, Lk = qe - qs, ke - ks
        if Lq == 0 or Lk == 0:
            continue
        qb = q[qs:qe].to(f).permute(1, 0, 2)
        kb = k[ks:ke].to(f).permute(1, 0, 2).repeat_interleave(g, dim=0)
        vb = v[ks:ke].to(f).permute(1, 0, 2).repeat_interleave(g, dim=0)
        s = torch.bmm(qb, kb.transpose(1, 2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq, device=q.device).unsqueeze(1) + offset
        j = torch.arange(Lk, device=q.device).unsqueeze(0)
        if alibi_slopes is not None:
            sl = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
            s = s - sl.to(f).reshape(H, 1, 1) * (i - j).abs().to(f)
        allow = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device)
        if wl >= 0:
            allow &= j >= i - wl
        if wr >= 0:
            allow &= j <= i + wr
        s = s.masked_fill(~allow, float("-inf"))
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m)
        z = e.sum(-1, keepdim=True)
        out[qs:qe] = (torch.bmm(e, vb) / torch.where(z > 0, z, torch.ones_like(z))).permute(1, 0, 2)
        lse[:, qs:qe] = (m + torch.log(z)).squeeze(-1).float()
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
