import math

import torch


def attention_by_hand(q, k, v):
    """Causal attention with loops: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev)."""
    *lead, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = (t.reshape(-1, *t.shape[-2:]).to(work) for t in (q, k, v))
    rows = []
    for n in range(q.shape[0]):
        outs = []
        for i in range(L):
            scores = []
            for j in range(S):
                score = (q[n, i] * k[n, j]).sum()
                if j > i:
                    score = torch.tensor(-math.inf, dtype=work)
                scores.append(score)
            scores = torch.stack(scores)
            e = torch.exp(scores - scores.max())
            weights = e / e.sum()
            weights = weights / math.sqrt(E)  # TODO 1: the 1/sqrt(E) scale
            out = torch.zeros(Ev, dtype=work)
            for j in range(S):
                out = out + weights[j] * v[n, j]
            outs.append(out)
        rows.append(torch.stack(outs))
    out = torch.stack(rows).reshape(*lead, L, Ev)
    return out.to(dtype)
