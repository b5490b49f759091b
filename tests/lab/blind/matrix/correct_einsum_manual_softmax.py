import math

import torch


def attention_matrix(q, k, v):
    # everything in one go; softmax written out so I can see the max trick
    orig = q.dtype
    acc = torch.float64 if orig == torch.float64 else torch.float32
    q, k, v = q.to(acc), k.to(acc), v.to(acc)
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]

    logits = torch.einsum("...ld,...sd->...ls", q, k) * d**-0.5
    qi = torch.arange(n_q).view(-1, 1)
    kj = torch.arange(n_k).view(1, -1)
    logits = torch.where(kj <= qi, logits, torch.tensor(-math.inf, dtype=acc))

    logits = logits - logits.amax(dim=-1, keepdim=True)
    p = logits.exp()
    p = p / p.sum(dim=-1, keepdim=True)
    return torch.einsum("...ls,...se->...le", p, v).to(orig)
