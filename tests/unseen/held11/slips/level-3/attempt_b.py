"""Level 3 of your attention lab: the multi-head module, as the lesson's tiny GPT uses it.

    x (B, T, C) -> q, k, v (B, H, T, d) -> scores (B, H, T, T) -> weights -> y (B, H, T, d) -> (B, T, C)

One linear layer makes q, k and v side by side; each is split into H heads of width d = C / H, each
head does causal attention on its own, the heads are put side by side again and a last linear layer
mixes what they found. Four pieces are marked TODO; as it stands it runs, and gives the wrong answer.
After each one, run

    attnlab lab check lab_module.py

It gives your module the library's weights and compares its output and every parameter's gradient
with the library's CausalSelfAttention; then it trains a tiny GPT with your module in it, beside the
same GPT with the library's, and compares the two losses step by step. Keep __init__ as it is: the
parameters' names (qkv, proj) are how the weights reach your module.
"""

TRUTH = {'api': 'level-3', 'level': 3, 'slips': ['the score matrix is built keys-against-queries, k @ q^T (entry [i, j] = k_i . q_j), i.e. the transpose of q @ k^T, and then masked and softmaxed as if rows were queries: every case fails'], 'kind': 'semantic'}

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
        # TODO 1 (heads)
        q, k, v = (t.reshape(B, T, self.n_head, self.head_dim).permute(0, 2, 1, 3) for t in (q, k, v))
        # TODO 2 (scores)
        scores = torch.matmul(k, q.transpose(-1, -2)) / math.sqrt(self.head_dim)
        # TODO 3 (causal softmax)
        keep = torch.tril(torch.ones(T, T, device=x.device)).bool()
        scores = scores.masked_fill(~keep, -math.inf)
        weights = scores.softmax(dim=-1)
        # TODO 4 (merge)
        y = torch.matmul(weights, v).permute(0, 2, 1, 3).reshape(B, T, C)
        return self.proj(y)
