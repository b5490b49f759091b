"""Causal attention in matrix form: softmax, then the future weights zeroed.
"""

TRUTH = {
    "api": "level-2",
    "bugs": [
        "The mask is applied after the softmax (future weights set to 0), so the remaining weights are not "
        "renormalised and each row sums to less than 1.",
        "The scores are divided by sqrt(S), the number of keys, instead of sqrt(E).",
    ],
    "kind": "two",
}

import math  # noqa: E402

import torch  # noqa: E402


def attention_matrix(q, k, v):
    """Causal attention as matrix products: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(S)  # (..., L, S): every query against every key
    mask = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(diagonal=1)  # True where key j comes after query i
    weights = torch.softmax(scores, dim=-1)  # each query's weights over the keys
    weights = weights.masked_fill(mask, 0.0)  # no weight on the future
    out = weights @ v  # (..., L, Ev)
    return out.to(dtype)
