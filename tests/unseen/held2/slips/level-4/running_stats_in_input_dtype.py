"""Tiled online-softmax forward; bf16 T=512 max err out 1.3e-2 (right 1.7e-3), lse 2.3e-2 (right 5.7e-7)."""

TRUTH = {
    "api": "level-4",
    "bugs": [
        "the tile's weights p, the running sum total and the accumulator acc are kept in the inputs' dtype "
        "(bfloat16 for bfloat16 inputs), rounded at every tile; they should stay in the float32 work dtype",
    ],
    "kind": "precision",
}

import math  # noqa: E402

import torch  # noqa: E402


def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64):
    """Attention tile by tile: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (out (..., L, Ev), lse (..., L)).

    is_causal: query i sees keys 0 .. i (top-left aligned, as PyTorch's is_causal=True). out is in q's dtype;
    lse = log Σ_j exp(s_ij) over the keys query i sees, in float32 (float64 for float64 inputs).
    """
    *lead, L, E = q.shape
    S, Ev, dtype = k.shape[-2], v.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scale = 1.0 / math.sqrt(E)
    out = torch.zeros(*lead, L, Ev, dtype=work, device=q.device)
    lse = torch.zeros(*lead, L, dtype=work, device=q.device)
    for i0 in range(0, L, block_q):  # one tile of queries at a time
        qb = q[..., i0:i0 + block_q, :]  # (..., Bq, E); the last tile may be shorter
        Bq = qb.shape[-2]
        rows = torch.arange(i0, i0 + Bq, device=q.device).unsqueeze(-1)  # (Bq, 1): the tile's queries' places
        m = torch.full((*lead, Bq, 1), -math.inf, dtype=work, device=q.device)  # each query's running max
        total = torch.zeros(*lead, Bq, 1, dtype=dtype, device=q.device)  # running sum of exp(score - m)
        acc = torch.zeros(*lead, Bq, Ev, dtype=dtype, device=q.device)  # running sum of exp(score - m) * v
        for j0 in range(0, S, block_k):
            if is_causal and j0 > i0 + Bq - 1:
                break
            kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]  # (..., Bk, E), (..., Bk, Ev)
            cols = torch.arange(j0, j0 + kb.shape[-2], device=q.device)  # (Bk,): the tile's keys' places
            s = (qb @ kb.transpose(-2, -1)) * scale  # (..., Bq, Bk): the tile's scores
            if is_causal:
                s = s.masked_fill(cols > rows, -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            m_safe = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_safe)
            p = torch.exp(s - m_safe).to(dtype)
            total = total * alpha.to(dtype) + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha.to(dtype) + p @ vb.to(dtype)
            m = m_new
        out[..., i0:i0 + Bq, :] = acc / total
        lse[..., i0:i0 + Bq] = (m + torch.log(total))[..., 0]
    return out.to(dtype), lse
