import math

import torch


def attention_by_hand(q, k, v):
    *lead, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = (t.reshape(-1, *t.shape[-2:]).to(work) for t in (q, k, v))
    rows = []
    for n in range(q.shape[0]):
        outs = []
        for i in range(L):
            raw = torch.stack([(q[n, i] * k[n, j]).sum() / math.sqrt(E) for j in range(S)])
            biggest = raw.max()  # largest score of the row, for a stable exp
            scores = []
            for j in range(S):
                if j > i:
                    scores.append(torch.tensor(-math.inf, dtype=work))
                else:
                    scores.append(raw[j])
            scores = torch.stack(scores)
            e = torch.exp(scores - biggest)
            weights = e / e.sum()
            out = torch.zeros(Ev, dtype=work)
            for j in range(S):
                out = out + weights[j] * v[n, j]
            outs.append(out)
        rows.append(torch.stack(outs))
    out = torch.stack(rows).reshape(*lead, L, Ev)
    return out.to(dtype)
