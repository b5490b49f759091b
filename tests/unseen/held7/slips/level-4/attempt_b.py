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

TRUTH = {'api': 'level-4', 'bugs': [], 'kind': 'correct'}


import math

import torch


def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64):
    """Attention tile by tile: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (out (..., L, Ev), lse (..., L)).

    is_causal: query i sees keys 0 .. i (top-left aligned, as PyTorch's is_causal=True). out is in q's dtype;
    lse = log Σ_j exp(s_ij) over the keys query i sees, in float32 (float64 for float64 inputs).
    """
    *lead, L, E = q.shape
    S, Ev, dtype = k.shape[-2], v.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    sm_scale = E ** -0.5
    out = torch.empty(*lead, L, Ev, dtype=work, device=q.device)
    lse = torch.empty(*lead, L, dtype=work, device=q.device)
    for start_q in range(0, L, block_q):
        stop_q = min(start_q + block_q, L)
        qt = q[..., start_q:stop_q, :] * sm_scale  # scale folded into the queries
        qpos = torch.arange(start_q, stop_q, device=q.device)
        # causal: the tile's last query is stop_q - 1, so no key at or past stop_q is ever needed
        kv_end = min(S, stop_q) if is_causal else S
        m_i = torch.full(qt.shape[:-1], -math.inf, dtype=work, device=q.device)  # (..., Bq)
        l_i = torch.zeros_like(m_i)
        o_i = torch.zeros(*qt.shape[:-1], Ev, dtype=work, device=q.device)
        for start_k in range(0, kv_end, block_k):
            stop_k = min(start_k + block_k, S)
            s = qt @ k[..., start_k:stop_k, :].transpose(-1, -2)
            if is_causal:
                kpos = torch.arange(start_k, stop_k, device=q.device)
                s = torch.where(kpos[None, :] > qpos[:, None], -math.inf, s)
            m_new = torch.maximum(m_i, s.max(dim=-1).values)
            # the first key tile holds key 0, which every query sees: m_new is finite from here on
            corr = torch.exp(m_i - m_new)
            p = torch.exp(s - m_new[..., None])
            l_i = corr * l_i + p.sum(-1)
            o_i = corr[..., None] * o_i + p @ v[..., start_k:stop_k, :]
            m_i = m_new
        out[..., start_q:stop_q, :] = o_i / l_i[..., None]
        lse[..., start_q:stop_q] = m_i + torch.log(l_i)
    return out.to(dtype), lse
