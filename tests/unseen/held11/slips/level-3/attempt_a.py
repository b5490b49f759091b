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

TRUTH = {'api': 'level-3', 'level': 3, 'slips': [], 'kind': 'correct'}

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
        H, d = self.n_head, self.head_dim
        q = q.view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
        k = k.view(B, T, H, d).transpose(1, 2)
        v = v.view(B, T, H, d).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))  # (B, H, T, T)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        att = att.masked_fill(future, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = att @ v  # (B, H, T, d)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again
        y = self.proj(y)
        return y
