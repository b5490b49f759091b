"""Four-line matrix attention with a boolean mask and masked_fill."""

TRUTH = {
    "api": "level-2",
    "bugs": [
        "the mask hides the lower triangle (keys 0 .. i, tril) instead of the keys after the query (triu "
        "diagonal 1): each query sees only the keys after it (with L >= S the last row sees nothing and is "
        "NaN)",
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
    future = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(future, -math.inf)
    weights = torch.softmax(scores, dim=-1)
    out = weights @ v  # (..., L, Ev)
    return out.to(dtype)
