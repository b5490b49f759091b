import math

import torch
from torch import nn


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention: (B, T, C) -> (B, T, C)."""

    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head, self.head_dim = n_head, d_model // n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)  # W_q, W_k and W_v side by side
        self.proj = nn.Linear(d_model, d_model)  # W_o: mixes what the heads found

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.n_head, self.head_dim
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.reshape(B, T, H, D).permute(0, 2, 1, 3)
        k = k.reshape(B, T, H, D).permute(0, 2, 1, 3)
        v = v.reshape(B, T, H, D).permute(0, 2, 1, 3)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        w = scores.softmax(dim=-1)
        y = w @ v  # (B, H, T, D)
        y = y.permute(0, 2, 3, 1).reshape(B, T, C)  # (B, T, D, H) -> (B, T, C)
        return self.proj(y)
