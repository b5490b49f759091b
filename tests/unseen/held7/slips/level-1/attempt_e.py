"""Your attention lab: write causal self-attention yourself, then have it graded and measured.

    out = softmax(mask(q @ kᵀ / √E)) @ v        query i may look at keys 0 .. i only

`attention_by_hand` does it one query and one key at a time. Four pieces are left for you, each
marked TODO; as it stands it runs, and gives the wrong answer. (Half precision is computed in
float32 here, as PyTorch does: a bfloat16 score has 3 significant digits, too few for exp.) After each one, run

    attnlab lab check attention_lab.py

It grades your function on the grid of cases that attnlab's own forms are held to (forward and
backward; float32, float64 and bfloat16) against a float64 oracle and PyTorch, says what failed
and the likely cause in a line, then measures its time and memory at T = 128, 512 and 2048.

When it passes, level 2 asks for the same computation in four matrix lines, and there its memory
grows like T²: `attnlab lab start --level matrix` writes lab_matrix.py. (`attnlab lab start --help`
lists all seven levels, from these loops to FlashAttention's backward, a KV cache and a Triton kernel.)
"""

TRUTH = {'api': 'level-1',
 'bugs': ['the causal mask is aligned at the bottom right: key j is hidden when j > i + (S - L) instead of j '
          '> i; identical when L == S, wrong when L != S (L=3,S=6 and L=6,S=3)',
          'the result is returned in the float32 work dtype, never cast back to the input dtype: bfloat16 '
          'inputs give a float32 output (dtype mismatch in every bfloat16 case)'],
 'kind': 'two'}


import math

import torch


def attention_by_hand(q, k, v):
    """Causal attention with loops: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    *lead, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    qs, ks, vs = (t.reshape(-1, *t.shape[-2:]).to(work) for t in (q, k, v))
    kidx = torch.arange(S)
    NEG = torch.tensor(float("-inf"), dtype=work)
    heads_out = []
    for n in range(qs.shape[0]):
        rows = []
        for i in range(L):
            srow = []
            for j in range(S):
                srow.append(torch.dot(qs[n, i], ks[n, j]) / E ** 0.5)
            srow = torch.stack(srow)
            srow = torch.where(kidx > i + (S - L), NEG, srow)
            p = torch.exp(srow - srow.max())
            p = p / p.sum()
            val = torch.zeros(Ev, dtype=work)
            for j in range(S):
                val = val + p[j] * vs[n, j]
            rows.append(val)
        heads_out.append(torch.stack(rows))
    out = torch.stack(heads_out).reshape(*lead, L, Ev)
    return out
