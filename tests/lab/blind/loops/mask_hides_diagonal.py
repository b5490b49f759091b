import math

import torch


def attention_by_hand(q, k, v):
    *lead, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    in_dtype = q.dtype
    work = torch.float64 if in_dtype == torch.float64 else torch.float32
    qs, ks, vs = (t.reshape(-1, *t.shape[-2:]).to(work) for t in (q, k, v))
    scale = 1 / math.sqrt(E)
    all_heads = []
    for h in range(qs.shape[0]):
        head_out = []
        for i in range(L):
            row = []
            for j in range(S):
                s = torch.dot(qs[h, i], ks[h, j]) * scale
                if j >= i:  # future keys are masked
                    s = torch.tensor(-math.inf, dtype=work)
                row.append(s)
            row = torch.stack(row)
            row = row - row.max()
            p = row.exp()
            p = p / p.sum()
            o = torch.zeros(Ev, dtype=work)
            for j in range(S):
                o += p[j] * vs[h, j]
            head_out.append(o)
        all_heads.append(torch.stack(head_out))
    return torch.stack(all_heads).reshape(*lead, L, Ev).to(in_dtype)
