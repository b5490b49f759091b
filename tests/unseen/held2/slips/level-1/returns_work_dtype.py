"""Loops over queries and keys, a stable softmax, one output row at a time."""

TRUTH = {
    "api": "level-1",
    "bugs": [
        "the output is returned in the float32 work dtype (bfloat16 in gives float32 out); it should be cast "
        "back to the inputs' dtype",
    ],
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
    scale = 1.0 / math.sqrt(E)
    rows = []
    for n in range(q.shape[0]):
        outs = []
        for i in range(L):  # one query at a time
            scores = []
            for j in range(S):  # against one key at a time
                score = (q[n, i] * k[n, j]).sum()  # the dot product of query i and key j
                score = score * scale
                if j > i:
                    score = torch.full_like(score, -math.inf)
                scores.append(score)
            scores = torch.stack(scores)  # (S,)
            e = torch.exp(scores - scores.max())
            weights = e / e.sum()  # (S,): adds up to 1
            out = torch.zeros(Ev, dtype=work)
            for j in range(S):
                out = out + weights[j] * v[n, j]  # the weighted sum of the values
            outs.append(out)
        rows.append(torch.stack(outs))  # (L, Ev)
    out = torch.stack(rows).reshape(*lead, L, Ev)
    return out
