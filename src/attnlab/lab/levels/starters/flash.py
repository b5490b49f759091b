"""Level 4 of your attention lab: the online softmax, one block of keys at a time (FlashAttention's forward).

Levels 1 and 2 hold every score of a query before its softmax: the matrix form holds all T x T of
them, and its memory grows like T². The softmax can be taken as the keys stream past, a block at a
time, if each query keeps three running things:

    m    the largest score seen so far          (..., L, 1)
    l    the sum of exp(score - m) so far      (..., L, 1)
    acc  the sum of exp(score - m) * v so far  (..., L, Ev)

When a block brings a larger score, m grows, and what was summed against the old m is scaled by
exp(m_old - m_new) so that it counts against the new one. At the end, out = acc / l. Nothing of
size (L, S) is ever held. Four pieces are marked TODO; as it stands it runs, and gives the wrong
answer. After each one, run

    attnlab lab check lab_flash.py

It grades your function on the lab's grid with block sizes it chooses (the last block is partial),
large logits included, says the likely cause of what fails, and measures its extra memory at
T = 512 ... 8192 with block = 64: it should grow like T (an exponent of at most 1.2).
"""

import math

import torch


def flash_forward(q, k, v, block=64):
    """Causal attention over key blocks: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i (top-left aligned, as PyTorch's is_causal=True); ``block`` keys at a time.
    """
    *lead, L, E = q.shape
    S, Ev, dtype = k.shape[-2], v.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scale = 1.0 / math.sqrt(E)
    m = torch.full((*lead, L, 1), -math.inf, dtype=work)  # each query's running max
    total = torch.zeros(*lead, L, 1, dtype=work)  # each query's running sum of exp(score - m)
    acc = torch.zeros(*lead, L, Ev, dtype=work)  # each query's running sum of exp(score - m) * v
    rows = torch.arange(L, device=q.device).unsqueeze(-1)  # (L, 1): query i
    for j0 in range(0, S - block + 1, block):  # TODO 1 (blocks): this loop leaves out a last, partial block
        kb, vb = k[..., j0:j0 + block, :], v[..., j0:j0 + block, :]  # (..., B, E), (..., B, Ev)
        s = (q @ kb.transpose(-2, -1)) * scale  # (..., L, B): the block's scores
        # TODO 2 (mask): key j0 + c comes after query i when j0 + c > i: its score becomes -inf (use rows)
        # TODO 3 (online softmax): the new max is the larger of m and the block's max; rescale total and acc by
        #   exp(m - new max), then add the block's exp(s - new max) to total and exp(s - new max) @ vb to acc
        #   (a row that has seen only -inf so far has m = -inf: keep exp(-inf - (-inf)) from making NaN)
    # TODO 4 (finish): out = acc / total, returned in the inputs' dtype
    return acc.to(dtype)
