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
        q, k, v = self.qkv(x).split(C, dim=-1)

        def heads(t):
            return t.reshape(B, T, H, d).permute(0, 2, 1, 3)

        q, k, v = heads(q), heads(k), heads(v)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) / d**0.5
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, -torch.inf)
        probs = scores.softmax(-1)
        out = torch.einsum("bhij,bhjd->bhid", probs, v)
        out = out.permute(0, 2, 1, 3).reshape(B, T, C)
        return self.proj(out)
