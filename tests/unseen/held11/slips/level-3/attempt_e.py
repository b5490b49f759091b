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

TRUTH = {'api': 'level-3', 'level': 3, 'slips': ['the causal mask is applied by multiplying the scores with a 0/1 lower-triangular matrix before the softmax, so a hidden key gets score 0 (weight exp(0) relative) instead of -inf: every case fails'], 'kind': 'semantic'}

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
        # each of q, k, v as (B, H, T, d)
        q = q.unflatten(-1, (self.n_head, self.head_dim)).transpose(1, 2)
        k = k.unflatten(-1, (self.n_head, self.head_dim)).transpose(1, 2)
        v = v.unflatten(-1, (self.n_head, self.head_dim)).transpose(1, 2)
        scale = self.head_dim ** -0.5
        att = q.matmul(k.transpose(2, 3)) * scale  # (B, H, T, T)
        lower = torch.tril(torch.ones(T, T, dtype=att.dtype, device=att.device))
        att = att * lower
        att = att.softmax(dim=-1)
        y = att.matmul(v)  # (B, H, T, d)
        y = y.transpose(1, 2).flatten(2)  # (B, T, C)
        return self.proj(y)
