"""Level 4 of your attention lab: FlashAttention's forward -- tiles of queries against tiles of keys.

Levels 1 and 2 hold every score of a query before its softmax: the matrix form holds all L x S of
them, and its memory grows like T². The softmax can be taken as the keys stream past, a tile at a
time, if each query keeps three running things:

    m    the largest score seen so far          (..., Bq, 1)
    l    the sum of exp(score - m) so far      (..., Bq, 1)
    acc  the sum of exp(score - m) * v so far  (..., Bq, Ev)

When a tile brings a larger score, m grows, and what was summed against the old m is scaled by
exp(m_old - m_new) so that it counts against the new one. At the end, out = acc / l, and the
log-sum-exp of the row's scores, lse = m + log(l), is kept: level 5's backward rebuilds the weights
from it, exp(score - lse), without a second softmax. As FlashAttention does, the queries come in
tiles too (block_q rows at a time), so each tile of queries is one small, independent job.

Under is_causal a tile of keys that comes wholly after a tile's last query is never seen by it:
skipping it is where the tiled causal forward saves about half the work. Five pieces are marked
TODO; as it stands it runs, and gives the wrong answer. After each one, run

    attnlab lab check lab_flash.py

It grades out on the lab's grid (causal and not, L != S, float32, float64 and bfloat16, large
logits), with tile sizes it chooses so that the last tiles are partial, and lse against the float64
oracle's; it counts the multiply-adds of your matrix products in a causal and a full call at
T = 512 with 64 x 64 tiles (the causal one should do about half: at most 60 %), says the likely cause
of what fails, and measures the extra memory at T = 512 ... 8192: it should grow like T (an exponent
of at most 1.2).
"""

TRUTH = {'api': 'level-4', 'level': 4, 'slips': [], 'kind': 'correct'}

import math

import torch


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
        total = torch.zeros(*lead, Bq, 1, dtype=work, device=q.device)  # running sum of exp(score - m)
        acc = torch.zeros(*lead, Bq, Ev, dtype=work, device=q.device)  # running sum of exp(score - m) * v
        last_key = S if not is_causal else min(S, i0 + Bq)  # keys past the tile's last query are never seen
        for j0 in range(0, last_key, block_k):
            kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]  # (..., Bk, E), (..., Bk, Ev)
            cols = torch.arange(j0, j0 + kb.shape[-2], device=q.device)  # (Bk,): the tile's keys' places
            s = (qb @ kb.transpose(-2, -1)) * scale  # (..., Bq, Bk): the tile's scores
            if is_causal:
                s = s.masked_fill(cols[None, :] > rows, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            finite = torch.isfinite(m_new)
            alpha = torch.where(finite, torch.exp(m - m_new), torch.zeros_like(m))
            p = torch.where(finite, torch.exp(s - m_new), torch.zeros_like(s))
            total = alpha * total + p.sum(-1, keepdim=True)
            acc = alpha * acc + p @ vb
            m = m_new
        out[..., i0:i0 + Bq, :] = acc / total
        lse[..., i0:i0 + Bq] = (m + torch.log(total)).squeeze(-1)
    return out.to(dtype), lse
