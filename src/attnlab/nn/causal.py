"""The lesson's attention module: causal self-attention, every step on its own line.

This is the module the lesson page walks through, line by line. It computes what
:class:`attnlab.nn.MultiHeadAttention` computes for one key/value head per query head (the tests
load the same weights into both and compare), but with nothing else in the way: no grouped-query
attention, no rotary positions, no KV cache, no choice of kernel. The attention itself is the
four lines of the formula, softmax(mask(QKᵀ · scale)) · V, written out as the matrix form does:

    x (B, T, C) -> q, k, v (B, H, T, d) -> scores (B, H, T, T) -> weights -> y (B, H, T, d) -> (B, T, C)

Its parameters carry the same names as MultiHeadAttention's (``qkv``, ``proj``), so a state dict
moves between the two.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import resolve_scale


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention written out: (B, T, C) -> (B, T, C)."""

    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0, *, scale="sqrt", bias: bool = True):
        super().__init__()
        if n_head < 1 or d_model % n_head:
            raise ValueError(f"d_model={d_model} must split into n_head={n_head} heads of equal width")
        self.n_head, self.head_dim = n_head, d_model // n_head
        self.scale = resolve_scale(scale, self.head_dim)  # "sqrt": 1/sqrt(d)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)  # W_q, W_k and W_v side by side
        self.proj = nn.Linear(d_model, d_model, bias=bias)  # W_o: mixes what the heads found
        self.attn_drop, self.resid_drop = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.qkv.in_features:
            raise ValueError(f"x must have shape (B, T, {self.qkv.in_features}), got {tuple(x.shape)}")
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, C) each
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, d): H small attentions
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1)  # (B, H, T, T): every query against every key
        scores = scores * self.scale  # keeps the spread of the scores the same at every head width
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)  # key j after query i
        scores = scores.masked_fill(future, float("-inf"))  # exp(-inf) = 0: no weight on the future
        weights = torch.softmax(scores, dim=-1)  # each row now adds up to 1
        y = self.attn_drop(weights) @ v  # (B, H, T, d): each query's weighted sum of the values
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C): the heads side by side again
        return self.resid_drop(self.proj(y))
