import math

import torch


def attention_by_hand(q, k, v):
    # one query row at a time, but the keys of that row all at once
    orig_dtype = q.dtype
    if orig_dtype == torch.float64:
        calc = torch.float64
    else:
        calc = torch.float32
    batch_shape = q.shape[:-2]
    n_q, dim = q.shape[-2], q.shape[-1]
    n_k = k.shape[-2]
    dv = v.shape[-1]

    Q = q.to(calc).reshape(-1, n_q, dim)
    K = k.to(calc).reshape(-1, n_k, dim)
    V = v.to(calc).reshape(-1, n_k, dv)

    result = torch.empty(Q.shape[0], n_q, dv, dtype=calc)
    inv_sqrt_d = 1.0 / math.sqrt(dim)
    for b in range(Q.shape[0]):
        for i in range(n_q):
            logits = (K[b] @ Q[b, i]) * inv_sqrt_d          # (n_k,)
            visible = min(i + 1, n_k)                        # keys 0..i
            logits = logits[:visible]
            logits = logits - logits.max()
            p = torch.exp(logits)
            p = p / p.sum()
            result[b, i] = p @ V[b, :visible]
    return result.reshape(*batch_shape, n_q, dv).to(orig_dtype)
