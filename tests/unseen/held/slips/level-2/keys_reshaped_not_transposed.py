"""Attention with matrices: turn k around to (E, S) so q @ k is every query against every key."""

TRUTH = {
    "api": "level-2",
    "bugs": ["k is turned to (..., E, S) with reshape instead of a transpose, which reorders its numbers rather than "
             "swapping the axes: the scores are not q_i . k_j (right only when S or E is 1)"],
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
    kt = k.reshape(*k.shape[:-2], E, S)  # (..., E, S)
    scores = q @ kt / math.sqrt(E)  # (..., L, S)
    mask = torch.ones(L, S, dtype=torch.bool).triu(1)  # key after query
    scores = scores.masked_fill(mask, -math.inf)
    weights = scores.softmax(dim=-1)
    out = weights @ v
    return out.to(dtype)
