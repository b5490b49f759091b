"""Matrix attention in four lines with a triu mask and torch.softmax."""

TRUTH = {
    "api": "level-2",
    "bugs": [
        "the softmax is taken over all keys and the future keys' weights are zeroed afterwards, so the rows "
        "no longer add up to 1; the scores should be set to -inf before the softmax",
    ],
    "kind": "semantic",
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
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(E)  # (..., L, S)
    future = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(diagonal=1)
    weights = torch.softmax(scores, dim=-1)
    weights = weights.masked_fill(future, 0.0)
    out = weights @ v  # (..., L, Ev)
    return out.to(dtype)
