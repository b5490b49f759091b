"""Causal attention in matrix form; the triangle lines up with the last key so it also works when L != S.
"""

TRUTH = {
    "api": "level-2",
    "bugs": [
        "The mask's diagonal is shifted to S - L + 1 (bottom-right alignment, as with a KV cache) instead of "
        "1, so when L != S queries see S - L keys too many (or too few) compared with the top-left is_causal.",
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
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(E)  # (..., L, S): every query against every key
    mask = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(diagonal=S - L + 1)  # the last query sees every key
    scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # each query's weights over the keys
    out = weights @ v  # (..., L, Ev)
    return out.to(dtype)
