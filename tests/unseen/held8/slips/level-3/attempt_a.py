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

TRUTH = {'level': 3, 'api': 'level-3', 'slips': ['heads split with q.reshape(B, H, T, d) straight from (B, T, C) instead of view(B, T, H, d).transpose(1, 2): each head gets a block of positions and features from all heads mixed; right only when H=1 (B=2,T=5,C=16,H=1 passes), y and all gradients fail for H=4 and H=3'], 'kind': 'semantic'}

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
        # TODO 1 (heads): each of q, k, v as (B, H, T, d): H small attentions side by side
        q = q.reshape(B, H, T, d)
        k = k.reshape(B, H, T, d)
        v = v.reshape(B, H, T, d)
        # TODO 2 (scores): every query against every key of its head, scaled by 1 / sqrt(d), (B, H, T, T)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        # TODO 3 (causal softmax): hide the keys after each query, then the softmax over the keys
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf"))
        att = att.softmax(dim=-1)
        # TODO 4 (merge): the weighted sum of the values, the heads back side by side (B, T, C), then proj
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.proj(y)
        return y
