import math

import torch


def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64):
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
        m = torch.full((*lead, Bq, 1), -math.inf, dtype=work, device=q.device)
        total = torch.zeros(*lead, Bq, 1, dtype=work, device=q.device)
        acc = torch.zeros(*lead, Bq, Ev, dtype=work, device=q.device)
        for j0 in range(0, S, block_k):
            if is_causal and j0 >= i0 + Bq:
                break
            kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]
            Bk = kb.shape[-2]
            s = (qb @ kb.transpose(-2, -1)) * scale
            if is_causal:
                future = torch.ones(Bq, Bk, dtype=torch.bool, device=q.device).triu(1)  # key after query
                s = s.masked_fill(future, -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            m_safe = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_safe)
            p = torch.exp(s - m_safe)
            total = total * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + p @ vb
            m = m_new
        out[..., i0:i0 + Bq, :] = acc / total
        lse[..., i0:i0 + Bq] = (m + torch.log(total))[..., 0]
    return out.to(dtype), lse
