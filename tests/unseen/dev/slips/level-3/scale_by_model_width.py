"""Multi-head causal self-attention, scores scaled by the square root of the width.
"""

TRUTH = {
    "api": "level-3",
    "bugs": [
        "The scores are divided by sqrt(C), the model width, instead of sqrt(d), the head width, so with H > "
        "1 heads the softmax is too flat.",
    ],
    "kind": "semantic",
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
        scores = q @ k.transpose(-2, -1) / math.sqrt(C)  # (B, H, T, T)
        future = torch.tril(torch.ones(T, T, device=x.device)) == 0  # True above the diagonal
        scores = scores.masked_fill(future, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # over the keys
        y = weights @ v  # (B, H, T, d)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again
        y = self.proj(y)
        return y
