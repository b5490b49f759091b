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
        H, d = self.n_head, self.head_dim
        q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
        att = q @ k.transpose(-2, -1) / d
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        att = att.softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)
