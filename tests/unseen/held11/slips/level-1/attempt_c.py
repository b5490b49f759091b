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

TRUTH = {'api': 'level-1', 'level': 1, 'slips': [], 'kind': 'correct'}

import math

import torch


def attention_by_hand(q, k, v):
    """Causal attention with loops: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    *lead, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = (t.reshape(-1, *t.shape[-2:]).to(work) for t in (q, k, v))  # every batch and head in one dim
    neg_inf = torch.tensor(float("-inf"), dtype=work)
    rows = []
    for n in range(q.shape[0]):
        outs = []
        for i in range(L):  # one query at a time
            scores = []
            for j in range(S):  # against one key at a time
                score = torch.dot(q[n, i], k[n, j])  # the dot product of query i and key j
                score = score * (1.0 / math.sqrt(E))  # scale
                score = torch.where(torch.tensor(j > i), neg_inf, score)  # mask: keys after the query
                scores.append(score)
            scores = torch.stack(scores)  # (S,)
            shifted = scores - torch.max(scores)  # largest score becomes 0: exp cannot overflow
            e = torch.exp(shifted)
            weights = e / e.sum()  # (S,): adds up to 1
            out = torch.zeros(Ev, dtype=work)
            for j in range(S):
                out = out + weights[j] * v[n, j]  # the weighted sum of the values
            outs.append(out)
        rows.append(torch.stack(outs))  # (L, Ev)
    out = torch.stack(rows).reshape(*lead, L, Ev)
    return out.to(dtype)  # back to the inputs' dtype
