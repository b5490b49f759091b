"""Attention by hand with loops; each score is kept as a plain Python number, like a list of floats in NumPy,
and turned into a tensor once the row is complete.
"""

TRUTH = {
    "api": "level-1",
    "bugs": ["each score is turned into a Python float (float(...)) and the row rebuilt with torch.tensor, which cuts "
             "the scores out of the autograd graph: the forward is right but q and k get no gradient"],
    "kind": "semantic",
}

import math  # noqa: E402

import torch  # noqa: E402


def attention_by_hand(q, k, v):
    """Causal attention with loops: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    *lead, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = (t.reshape(-1, *t.shape[-2:]).to(work) for t in (q, k, v))  # every batch and head in one dim
    rows = []
    for n in range(q.shape[0]):
        outs = []
        for i in range(L):  # one query at a time
            scores = []
            for j in range(S):  # against one key at a time
                score = float((q[n, i] * k[n, j]).sum())  # the dot product of query i and key j
                score = score / math.sqrt(E)
                if j > i:
                    score = -math.inf  # keys after the query get nothing
                scores.append(score)
            scores = torch.tensor(scores, dtype=work)  # (S,)
            e = torch.exp(scores - scores.max())
            weights = e / e.sum()  # (S,): adds up to 1
            out = torch.zeros(Ev, dtype=work)
            for j in range(S):
                out = out + weights[j] * v[n, j]  # the weighted sum of the values
            outs.append(out)
        rows.append(torch.stack(outs))  # (L, Ev)
    out = torch.stack(rows).reshape(*lead, L, Ev)
    return out.to(dtype)
