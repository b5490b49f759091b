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

TRUTH = {'api': 'level-3', 'level': 3, 'slips': ['the heads are merged with y.reshape(B, T, C) straight from (B, H, T, d), without moving H next to d first, so rows of different heads and times are interleaved: wrong whenever H > 1 (H = 1 passes)'], 'kind': 'semantic'}

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
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, d)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, d)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, d)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, H, T, T)
        bias = torch.full((T, T), float("-inf"), dtype=att.dtype, device=att.device).triu(1)
        att = torch.softmax(att + bias, dim=-1)
        y = att @ v  # (B, H, T, d)
        y = y.reshape(B, T, C)  # (B, T, C)
        y = self.proj(y)
        return y
