"""Causal multi-head self-attention: softmax, then the future weights cut, the heads merged, proj.
"""

TRUTH = {
    "api": "level-3",
    "bugs": [
        "The causal mask zeroes the weights after the softmax instead of setting the scores to -inf before "
        "it, so each row's weights sum to less than 1.",
        "The heads are merged by reshaping (B, H, T, d) straight to (B, T, C) without transposing H and T "
        "back.",
    ],
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
        H, d = self.n_head, self.head_dim
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, C) each
        q = q.view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
        k = k.view(B, T, H, d).transpose(1, 2)
        v = v.view(B, T, H, d).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, T, T)
        future = torch.tril(torch.ones(T, T, device=x.device)) == 0  # True above the diagonal
        weights = torch.softmax(scores, dim=-1)  # over the keys
        weights = weights.masked_fill(future, 0.0)  # nothing from the future
        y = weights @ v  # (B, H, T, d)
        y = y.reshape(B, T, C)  # heads side by side again
        y = self.proj(y)
        return y
