"""flash_attn_varlen_func, per-sequence loop over cu_seqlens with an online-softmax inner loop over key tiles."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "each sequence's keys and values are sliced with cu_seqlens_q instead of cu_seqlens_k "
        "(k[cu_seqlens_q[b]:cu_seqlens_q[b+1]]), so whenever query and key lengths differ a sequence attends "
        "the wrong rows of k and v"
    ],
    "kind": "semantic",
}

BLOCK_N = 16


def _attend(q, k, v, scale, causal, window_size, softcap, slopes):
    L, H, D = q.shape
    S, Hkv = k.shape[0], k.shape[1]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    qh = q.to(f).transpose(0, 1)
    kh = k.to(f).repeat_interleave(H // Hkv, 1).transpose(0, 1)
    vh = v.to(f).repeat_interleave(H // Hkv, 1).transpose(0, 1)
    left, right = window_size
    if causal:
        right = 0
    qpos = torch.arange(L, device=q.device)[:, None] + S - L
    m = torch.full((H, L, 1), -math.inf, dtype=f, device=q.device)
    den = torch.zeros((H, L, 1), dtype=f, device=q.device)
    acc = torch.zeros((H, L, D), dtype=f, device=q.device)
    for n0 in range(0, S, BLOCK_N):
        kpos = torch.arange(n0, min(S, n0 + BLOCK_N), device=q.device)[None, :]
        s = qh @ kh[:, n0:n0 + BLOCK_N].transpose(-1, -2) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes.to(f)[:, None, None] * (qpos - kpos).abs().to(f)
        ok = torch.ones(L, kpos.shape[1], dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= kpos >= qpos - left
        if right >= 0:
            ok &= kpos <= qpos + right
        s = s.masked_fill(~ok, -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - m_use)
        p = torch.exp(s - m_use)
        den = den * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ vh[:, n0:n0 + BLOCK_N]
        m = m_new
    has = den > 0
    out = acc / torch.where(has, den, torch.ones_like(den))
    lse = torch.where(has, m + torch.log(torch.where(has, den, torch.ones_like(den))), torch.full_like(m, -math.inf))
    return out.transpose(0, 1), lse.squeeze(-1)


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    out = torch.zeros_like(q)
    lse_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    lse = torch.full((H, total_q), -math.inf, dtype=lse_t, device=q.device)
    batch = cu_seqlens_q.numel() - 1
    for b in range(batch):
        qs, qe = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ks, ke = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        if qe == qs:
            continue
        sl = None
        if alibi_slopes is not None:
            sl = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
        o, lse_b = _attend(q[qs:qe], k[ks:ke], v[ks:ke], scale, causal, window_size, softcap, sl)
        out[qs:qe] = o.to(q.dtype)
        lse[:, qs:qe] = lse_b.to(lse_t)
    if return_attn_probs:
        return out, lse, None
    return out
