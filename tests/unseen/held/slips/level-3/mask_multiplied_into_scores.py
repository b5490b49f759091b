"""Multi-head causal attention; the causal mask is a lower-triangular 0/1 matrix applied to the scores."""

TRUTH = {
    "api": "level-3",
    "bugs": ["the causal mask multiplies the scores by a 0/1 lower-triangular matrix, so future keys get score 0 "
             "instead of -inf and still take weight exp(0) in the softmax: the future leaks in"],
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
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, d)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        tril = torch.tril(torch.ones(T, T, dtype=scores.dtype, device=x.device))
        scores = scores * tril  # keep the past, zero the future
        weights = torch.softmax(scores, dim=-1)
        y = weights @ v  # (B, H, T, d)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y)
