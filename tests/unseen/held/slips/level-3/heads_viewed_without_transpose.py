"""Multi-head causal self-attention module: reshape q, k, v to (B, H, T, d) heads, masked softmax, merge, project."""

TRUTH = {
    "api": "level-3",
    "bugs": ["q, k and v are split into heads with reshape(B, H, T, d) straight from (B, T, C) instead of "
             "view(B, T, H, d).transpose(1, 2): each 'head' is a scramble of several tokens' features and the "
             "causal order is lost"],
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
        q = q.reshape(B, self.n_head, T, self.head_dim)  # (B, H, T, d)
        k = k.reshape(B, self.n_head, T, self.head_dim)
        v = v.reshape(B, self.n_head, T, self.head_dim)
        att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        mask = torch.tril(torch.ones(T, T, device=x.device)) == 0
        att = att.masked_fill(mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = att @ v  # (B, H, T, d)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.proj(y)
        return y
