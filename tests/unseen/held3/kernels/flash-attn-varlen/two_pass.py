"""Two-pass varlen attention: pass 1 computes each row's log-sum-exp over key blocks, pass 2 forms exp(s - lse) @ V."""
import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the per-row lse produced by pass 1 is stored in a bfloat16 buffer (fixed dtype) and pass 2 uses it unnormalised: "
        "P = exp(s - lse_bf16), out = P @ V, so each row is scaled by exp(lse - lse_bf16) (errors up to ~1-2%) and the "
        "returned lse is only bfloat16-accurate; the lse buffer must be float32",
    ],
    "kind": "precision",
}

_BLOCK = 64
_LSE_BUF = torch.bfloat16


def _scores(qb, kb, j0, j1, scale, softcap, slopes, qpos, left, right, ct):
    kpos = torch.arange(j0, j1, device=qb.device).view(1, -1)
    s = torch.matmul(qb, kb[:, j0:j1].transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        s = s - slopes * (qpos - kpos).abs().to(ct)
    ok = torch.ones(qpos.size(0), j1 - j0, dtype=torch.bool, device=qb.device)
    if left >= 0:
        ok &= kpos >= qpos - left
    if right >= 0:
        ok &= kpos <= qpos + right
    return s.masked_fill(~ok, float("-inf"))


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    rep = H // k.shape[1]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    buf_t = ct if q.dtype == torch.float64 else _LSE_BUF
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(total_q, H, v.shape[-1], dtype=ct, device=q.device)
    lse_buf = torch.full((H, total_q), float("-inf"), dtype=buf_t, device=q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        Lq, Lk = q1 - q0, k1 - k0
        if Lq == 0:
            continue
        qb = q[q0:q1].to(ct).transpose(0, 1)
        kb = k[k0:k1].to(ct).transpose(0, 1).repeat_interleave(rep, dim=0)
        vb = v[k0:k1].to(ct).transpose(0, 1).repeat_interleave(rep, dim=0)
        slopes = None
        if alibi_slopes is not None:
            slopes = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).to(ct).reshape(H, 1, 1)
        qpos = torch.arange(Lq, device=q.device).view(-1, 1) + (Lk - Lq)
        # pass 1: running max / sum
        m = torch.full((H, Lq), float("-inf"), dtype=ct, device=q.device)
        l = torch.zeros((H, Lq), dtype=ct, device=q.device)
        for j0 in range(0, Lk, _BLOCK):
            j1 = min(Lk, j0 + _BLOCK)
            s = _scores(qb, kb, j0, j1, scale, softcap, slopes, qpos, left, right, ct)
            m_new = torch.maximum(m, s.amax(-1))
            ref = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            l = l * torch.exp(m - ref) + torch.exp(s - ref.unsqueeze(-1)).sum(-1)
            m = m_new
        row_lse = torch.where(l > 0, m + torch.log(torch.where(l > 0, l, torch.ones_like(l))),
                              torch.full_like(l, float("-inf")))
        lse_buf[:, q0:q1] = row_lse.to(buf_t)
        # pass 2: probabilities from the stored lse
        lse_row = lse_buf[:, q0:q1].to(ct)
        lse_row = torch.where(torch.isfinite(lse_row), lse_row, torch.zeros_like(lse_row)).unsqueeze(-1)
        acc = torch.zeros((H, Lq, vb.size(-1)), dtype=ct, device=q.device)
        for j0 in range(0, Lk, _BLOCK):
            j1 = min(Lk, j0 + _BLOCK)
            s = _scores(qb, kb, j0, j1, scale, softcap, slopes, qpos, left, right, ct)
            acc = acc + torch.matmul(torch.exp(s - lse_row), vb[:, j0:j1])
        out[q0:q1] = acc.transpose(0, 1)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse_buf.float(), None
    return out
