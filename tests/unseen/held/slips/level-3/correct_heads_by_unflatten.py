"""Causal multi-head self-attention module: split C into H heads with unflatten + transpose, one masked softmax
per head over its keys, heads flattened back side by side, then the output projection.
"""

TRUTH = {
    "api": "level-3",
    "bugs": [],
    "kind": "correct",
}

import math  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention: (B, T, C) -> (B, T, C)."""

    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head, self.head_dim = n_head, d_model // n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)  # W_q, W_k and W_v side by side
        self.proj = nn.Linear(d_model, d_model)  # W_o: mixes what the heads found

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, C) each
        H, d = self.n_head, self.head_dim
        q, k, v = (t.unflatten(-1, (H, d)).transpose(1, 2) for t in (q, k, v))  # (B, H, T, d)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)  # (B, H, T, T)
        later = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        weights = scores.masked_fill(later, float("-inf")).softmax(dim=-1)
        y = weights @ v  # (B, H, T, d)
        y = y.transpose(1, 2).flatten(2)  # (B, T, C): head 0's d features, then head 1's, ...
        return self.proj(y)
