"""Attention small enough to check with a pencil: three tokens, head width 4, round numbers.

Every step of ``softmax(mask(Q Kᵀ / √d)) V`` is kept, with the line of Python that computes it, so
the page can set the numbers beside the code. With d = 4 the scale is 1/√4 = 1/2, and the scores
are whole numbers, so only the softmax needs a calculator (its exponentials are written out too).
The last step checks the hand computation against attnlab's matrix form and PyTorch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlab.kernels import matrix

TOKENS = ["the", "cat", "sat"]
Q = [[1, 0, 1, 0], [0, 2, 0, 0], [1, 1, 0, 2]]  # (3, 4): what each token looks for
K = [[1, 0, 1, 0], [0, 1, 0, 1], [2, 0, 0, 1]]  # (3, 4): what each token offers
V = [[1, 0], [0, 1], [2, 2]]  # (3, 2): what each token hands over (values may have another width)

CODE = {  # the lines the page shows, in order; `future` is the upper triangle above the diagonal
    "scores": "scores = q @ k.T                     # (3, 4) @ (4, 3) -> (3, 3)",
    "scaled": "scaled = scores / math.sqrt(4)       # ÷ √d = ÷ 2",
    "masked": "masked = scaled.masked_fill(future, float('-inf'))",
    "exps": "e = torch.exp(masked - masked.amax(-1, keepdim=True))  # largest in each row -> e^0 = 1",
    "weights": "weights = e / e.sum(-1, keepdim=True)  # each row sums to 1",
    "out": "out = weights @ v                     # (3, 3) @ (3, 2) -> (3, 2)",
}


@dataclass
class Worked:
    tokens: list[str]
    q: list[list[float]]
    k: list[list[float]]
    v: list[list[float]]
    scale: float
    scores: list[list[float]]
    scaled: list[list[float]]
    masked: list[list[float | None]]  # None: -inf
    exps: list[list[float]]  # exp(masked - row max); 0 where masked
    sums: list[float]  # each row's sum of exps
    weights: list[list[float]]
    out: list[list[float]]
    code: dict[str, str]
    err_matrix: float  # max |out - attnlab's matrix form|
    err_torch: float  # max |out - F.scaled_dot_product_attention|


def run() -> Worked:
    q, k, v = (torch.tensor(m, dtype=torch.float64) for m in (Q, K, V))
    d = q.shape[1]
    future = torch.ones(3, 3, dtype=torch.bool).triu(1)
    scores = q @ k.T  # (3, 3)
    scaled = scores / math.sqrt(d)
    masked = scaled.masked_fill(future, float("-inf"))
    e = torch.exp(masked - masked.amax(-1, keepdim=True))
    weights = e / e.sum(-1, keepdim=True)
    out = weights @ v  # (3, 2)
    mine = matrix.attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    return Worked(TOKENS, q.tolist(), k.tolist(), v.tolist(), 1 / math.sqrt(d), scores.tolist(), scaled.tolist(),
                  [[None if future[i, j] else float(scaled[i, j]) for j in range(3)] for i in range(3)], e.tolist(),
                  e.sum(-1).tolist(), weights.tolist(), out.tolist(), dict(CODE),
                  float((out - mine).abs().max()), float((out - ref).abs().max()))
