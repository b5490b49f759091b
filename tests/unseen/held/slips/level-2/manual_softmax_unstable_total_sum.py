"""Attention as matrices with the softmax written out the way I'd write it in NumPy: exp, then divide by the sum."""

TRUTH = {
    "api": "level-2",
    "bugs": ["the softmax is exp(scores) with no max subtracted: with large logits exp overflows to inf and rows come "
             "out NaN",
             "the exps are divided by e.sum() with no dim, the sum over every query, key, head and batch at once, "
             "instead of each query's own row sum: the weights of a row add up to far less than 1"],
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
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)  # (..., L, S)
    mask = torch.arange(S, device=q.device)[None, :] > torch.arange(L, device=q.device)[:, None]  # j > i
    scores = scores.masked_fill(mask, -math.inf)
    e = torch.exp(scores)
    weights = e / e.sum()
    out = weights @ v
    return out.to(dtype)
