"""Causal attention with loops, one query at a time, that only ever builds the scores of the keys the query sees.

Query i looks at keys 0 .. min(i, S - 1), so instead of masking the others to -inf this version never computes them:
the softmax runs over the visible scores alone (largest one subtracted first), and the values loop stops at the same
key. Half precision is worked in float32 and the result goes back to the inputs' dtype.
"""

TRUTH = {
    "api": "level-1",
    "bugs": [],
    "kind": "correct",
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
            seen = min(i + 1, S)  # keys 0 .. i, but there are only S of them
            out = torch.zeros(Ev, dtype=work, device=q.device)
            if seen == 0:
                outs.append(out)
                continue
            scores = []
            for j in range(seen):  # only the keys query i may look at: nothing to mask afterwards
                score = (q[n, i] * k[n, j]).sum() * scale
                scores.append(score)
            scores = torch.stack(scores)  # (seen,)
            biggest = scores.max()
            e = torch.exp(scores - biggest)  # every exponent <= 0: no overflow
            weights = e / e.sum()
            for j in range(seen):
                out = out + weights[j] * v[n, j]
            outs.append(out)
        rows.append(torch.stack(outs))  # (L, Ev)
    out = torch.stack(rows).reshape(*lead, L, Ev)
    return out.to(dtype)
