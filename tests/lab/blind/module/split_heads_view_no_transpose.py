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
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, C) each
        q = q.view(B, self.n_head, T, self.head_dim)  # (B, H, T, d)
        k = k.view(B, self.n_head, T, self.head_dim)
        v = v.view(B, self.n_head, T, self.head_dim)
        att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        mask = torch.tril(torch.ones(T, T, device=x.device)) == 0
        att = att.masked_fill(mask, float("-inf"))
        att = att.softmax(dim=-1)
        y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y)
