import math

import torch


def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64):
    """Attention tile by tile -> (out, lse)."""
    *lead, L, E = q.shape
    S, Ev, dtype = k.shape[-2], v.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scale = 1.0 / math.sqrt(E)
    out = torch.zeros(*lead, L, Ev, dtype=work, device=q.device)
    lse = torch.zeros(*lead, L, dtype=work, device=q.device)
    for i0 in range(0, L, block_q):
        qb = q[..., i0:i0 + block_q, :]
        Bq = qb.shape[-2]
        rows = torch.arange(i0, i0 + Bq, device=q.device).unsqueeze(-1)
        m = torch.full((*lead, Bq, 1), -math.inf, dtype=work, device=q.device)
        total = torch.zeros(*lead, Bq, 1, dtype=work, device=q.device)
        acc = torch.zeros(*lead, Bq, Ev, dtype=work, device=q.device)
        for j0 in range(0, S, block_k):  # every tile; the mask hides the future
            kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]
            cols = torch.arange(j0, j0 + kb.shape[-2], device=q.device)
            s = (qb @ kb.transpose(-2, -1)) * scale
            if is_causal:
                s = s.masked_fill(cols > rows, -math.inf)
            m_new = torch.max(m, s.max(dim=-1, keepdim=True).values)
            safe = m_new.clone()
            safe[safe == -math.inf] = 0.0
            alpha = (m - safe).exp()
            p = (s - safe).exp()
            total = alpha * total + p.sum(-1, keepdim=True)
            acc = alpha * acc + p @ vb
            m = m_new
        out[..., i0:i0 + Bq, :] = acc / total
        lse[..., i0:i0 + Bq] = (m + total.log())[..., 0]
    return out.to(dtype), lse
