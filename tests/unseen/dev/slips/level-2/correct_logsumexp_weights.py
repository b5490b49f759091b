"""Causal attention in four tensor lines, with the softmax written as exp(score - logsumexp(row)).

The scores come from an einsum, the mask from comparing key places with query places, and the weights from
subtracting each row's log-sum-exp (which is the stable softmax in one line). Computed in float32 for half inputs.
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
    scores = torch.einsum("...le,...se->...ls", q, k) / math.sqrt(E)  # (..., L, S)
    later = torch.arange(S, device=q.device)[None, :] > torch.arange(L, device=q.device)[:, None]  # (L, S)
    scores = scores.masked_fill(later, float("-inf"))
    weights = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))  # rows add up to 1
    out = weights @ v  # (..., L, Ev)
    return out.to(dtype)
