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

TRUTH = {'api': 'level-4', 'level': 4, 'slips': ['under is_causal the key tiles after the query tile are masked but never skipped: out and lse are right, but the causal call does as many multiply-adds as the full one (the T=512 work check fails)'], 'kind': 'semantic'}

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
        for j0 in range(0, S, block_k):
            kb = k[..., j0:j0 + block_k, :]
            vb = v[..., j0:j0 + block_k, :]
            cols = torch.arange(j0, j0 + kb.shape[-2], device=q.device)
            s = torch.matmul(qb, kb.transpose(-2, -1)) * scale
            if is_causal:
                s = torch.where(cols > rows, torch.tensor(-math.inf, dtype=work), s)
            tile_max = s.max(dim=-1, keepdim=True).values
            new_m = torch.max(m, tile_max)
            # rows that have only seen -inf so far: keep exp(-inf - (-inf)) from making NaN
            shift = torch.nan_to_num(new_m, neginf=0.0)
            correction = torch.exp(m - shift)
            e = torch.exp(s - shift)
            total = correction * total + e.sum(dim=-1, keepdim=True)
            acc = correction * acc + torch.matmul(e, vb)
            m = new_m
        out[..., i0:i0 + Bq, :] = acc / total
        lse[..., i0:i0 + Bq] = m.squeeze(-1) + torch.log(total.squeeze(-1))
    return out.to(dtype), lse
