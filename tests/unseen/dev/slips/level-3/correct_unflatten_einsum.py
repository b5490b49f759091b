"""Causal multi-head self-attention for the tiny GPT, heads split with unflatten and the scores taken by einsum.

q, k, v are cut into H heads of width d along the features (unflatten, then heads moved before time), the scores are
an einsum over the head width, the future is hidden with a strictly-upper-triangular mask, and the heads are put side
by side again (time back before heads, then flatten) before the output projection.
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
        q, k, v = (t.unflatten(-1, (self.n_head, self.head_dim)).transpose(1, 2) for t in (q, k, v))  # (B, H, T, d)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(self.head_dim)  # (B, H, T, T)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        y = torch.einsum("bhij,bhjd->bhid", weights, v)  # (B, H, T, d)
        y = y.transpose(1, 2).flatten(2)  # (B, T, H * d): heads side by side
        return self.proj(y)
