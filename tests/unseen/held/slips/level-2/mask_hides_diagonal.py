"""Attention in four lines; the causal mask comes from torch.triu of a ones matrix."""

TRUTH = {
    "api": "level-2",
    "bugs": ["the mask is torch.triu(ones(L, S)) with the default diagonal=0, so it also hides the diagonal: query i "
             "sees only keys 0 .. i-1 and query 0 sees nothing (NaN row)"],
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
    scores = q @ k.transpose(-1, -2) / math.sqrt(E)  # (..., L, S)
    mask = torch.triu(torch.ones(L, S, device=q.device)).bool()  # upper triangle = the future
    scores = scores.masked_fill(mask, -math.inf)
    weights = torch.softmax(scores, dim=-1)
    out = torch.matmul(weights, v)
    return out.to(dtype)
