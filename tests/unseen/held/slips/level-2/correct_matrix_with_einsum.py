"""Causal attention as four tensor lines: einsum for the scores, a triu mask of the future, softmax over the keys,
and one more product with the values.
"""

TRUTH = {
    "api": "level-2",
    "bugs": [],
    "kind": "correct",
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
    scores = torch.einsum("...ie,...je->...ij", q, k) / math.sqrt(E)  # (..., L, S)
    future = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(diagonal=1)  # True where j > i
    scores = scores.masked_fill(future, -math.inf)
    weights = torch.softmax(scores, dim=-1)  # over the keys: the last dim
    out = torch.einsum("...ij,...jd->...id", weights, v)  # (..., L, Ev)
    return out.to(dtype)
