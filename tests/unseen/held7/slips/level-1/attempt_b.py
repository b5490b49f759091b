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

TRUTH = {'api': 'level-1', 'bugs': [], 'kind': 'correct'}


import math

import torch


def attention_by_hand(q, k, v):
    """Causal attention with loops: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    *lead, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    in_dtype = q.dtype
    work = torch.float64 if in_dtype == torch.float64 else torch.float32
    Q = q.reshape(-1, L, E).to(work)
    K = k.reshape(-1, S, E).to(work)
    V = v.reshape(-1, S, Ev).to(work)
    inv_sqrt = 1.0 / math.sqrt(E)
    result = []
    for b in range(Q.shape[0]):
        per_query = []
        for i in range(L):
            # keys 0..i are the only ones query i may see, so only those get a score
            n_visible = min(i + 1, S)
            s = torch.stack([(Q[b, i] * K[b, j]).sum() * inv_sqrt for j in range(n_visible)])
            biggest = s.max()
            w = torch.exp(s - biggest)
            w = w / w.sum()
            acc = torch.zeros(Ev, dtype=work)
            for j in range(n_visible):
                acc = acc + w[j] * V[b, j]
            per_query.append(acc)
        result.append(torch.stack(per_query))
    return torch.stack(result).reshape(*lead, L, Ev).to(in_dtype)
