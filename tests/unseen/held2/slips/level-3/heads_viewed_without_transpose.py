"""Multi-head attention: split into heads, attend per head, merge, project."""

TRUTH = {
    "api": "level-3",
    "bugs": [
        "q, k and v are split into heads by reshape(B, H, T, d) straight from (B, T, C), which mixes tokens "
        "and features across heads; it should be view(B, T, H, d).transpose(1, 2)",
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
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, C) each
        H, d = self.n_head, self.head_dim
        q = q.reshape(B, H, T, d)
        k = k.reshape(B, H, T, d)
        v = v.reshape(B, H, T, d)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))  # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(future, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = att @ v  # (B, H, T, d)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.proj(y)
        return y
