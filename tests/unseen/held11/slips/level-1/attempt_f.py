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

TRUTH = {'api': 'level-1', 'level': 1, 'slips': ['the key loop runs j over range(i + 1) instead of masking: for a query past the last key (L > S) it indexes keys that do not exist (IndexError); L <= S passes'], 'kind': 'semantic'}

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
    q, k, v = (t.reshape(-1, *t.shape[-2:]).to(work) for t in (q, k, v))
    batch_out = []
    for n in range(q.shape[0]):
        qn, kn, vn = q[n], k[n], v[n]
        per_query = []
        for i in range(L):
            # keys 0 .. i only
            visible = [qn[i] @ kn[j] / math.sqrt(E) for j in range(i + 1)]
            visible = torch.stack(visible)
            w = torch.exp(visible - visible.max())
            w = w / w.sum()
            acc = torch.zeros(Ev, dtype=work)
            for j, wj in enumerate(w):
                acc = acc + wj * vn[j]
            per_query.append(acc)
        batch_out.append(torch.stack(per_query))
    return torch.stack(batch_out).reshape(*lead, L, Ev).to(dtype)
