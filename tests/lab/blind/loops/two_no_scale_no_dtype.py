import math

import torch


def attention_by_hand(q, k, v):
    *lead, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
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
            out = torch.zeros(Ev, dtype=work)
            for j in range(S):
                out = out + weights[j] * v[n, j]
            outs.append(out)
        rows.append(torch.stack(outs))
    return torch.stack(rows).reshape(*lead, L, Ev)
