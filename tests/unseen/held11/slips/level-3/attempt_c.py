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

TRUTH = {'api': 'level-3', 'level': 3, 'slips': ['scores scaled by 1/sqrt(C) (the model width) instead of 1/sqrt(d) (the head width): wrong whenever H > 1', 'the mask is made with triu(ones, 1) but used as masked_fill(mask == 0, -inf), the tril idiom: it hides the past and the diagonal and keeps the future, so the last query sees nothing (NaN): every case fails'], 'kind': 'two'}

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
        nh, hd = self.n_head, self.head_dim
        q = q.view(B, T, nh, hd).transpose(1, 2)
        k = k.view(B, T, nh, hd).transpose(1, 2)
        v = v.view(B, T, nh, hd).transpose(1, 2)
        att = q @ k.transpose(-2, -1) / math.sqrt(C)
        mask = torch.triu(torch.ones(T, T, device=x.device), diagonal=1)
        att = att.masked_fill(mask == 0, float("-inf"))
        att = nn.functional.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        y = self.proj(y)
        return y
