import math

import torch


def attention_by_hand(q, k, v):
    *batch, n_queries, dim = q.shape
    n_keys, dim_v = k.shape[-2], v.shape[-1]
    out_dtype = q.dtype
    acc_dtype = torch.float64 if out_dtype == torch.float64 else torch.float32
    Q = q.reshape(-1, n_queries, dim).to(acc_dtype)
    K = k.reshape(-1, n_keys, dim).to(acc_dtype)
    V = v.reshape(-1, n_keys, dim_v).to(acc_dtype)
    heads = []
    for b in range(Q.shape[0]):
        per_query = []
        for qi in range(n_queries):
            s = torch.empty(n_keys, dtype=acc_dtype)
            for kj in range(n_keys):
                if kj > qi + 1:
                    s[kj] = -math.inf
                else:
                    s[kj] = torch.dot(Q[b, qi], K[b, kj]) / dim
            w = torch.softmax(s, dim=0)
            per_query.append(sum(w[kj] * V[b, kj] for kj in range(n_keys)))
        heads.append(torch.stack(per_query))
    return torch.stack(heads).reshape(*batch, n_queries, dim_v).to(out_dtype)
