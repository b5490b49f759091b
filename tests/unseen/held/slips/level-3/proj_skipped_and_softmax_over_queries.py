"""Causal self-attention module: heads, scaled scores, causal softmax, heads merged back."""

TRUTH = {
    "api": "level-3",
    "bugs": ["the output projection self.proj is never applied: the merged heads are returned as they are, and proj's "
             "weight and bias get no gradient",
             "the softmax is taken over dim=-2 (the queries) instead of dim=-1 (the keys), so each key's column "
             "adds up to 1 rather than each query's row"],
    "kind": "two",
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
        heads = lambda t: t.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)  # (B, H, T, d)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        weights = torch.softmax(scores, dim=-2)
        y = weights @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return y
