"""Small pieces the experiments share: a seeded vocabulary of token vectors and seeded projections."""

from __future__ import annotations

import torch


def embed(words: list[str], d: int, seed: int, vocab: list[str] | None = None) -> torch.Tensor:
    """One fixed random vector per word of ``vocab`` (float64): the same word always gets the same vector. (T, d)"""
    vocab = sorted(set(words)) if vocab is None else sorted(set(vocab))
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(len(vocab), d, generator=g, dtype=torch.float64)
    return table[[vocab.index(w) for w in words]]


def projections(d_model: int, d_head: int, seed: int, n: int = 3) -> list[torch.Tensor]:
    """``n`` seeded (d_model, d_head) matrices scaled by 1/sqrt(d_model), so projected features have unit variance."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(d_model, d_head, generator=g, dtype=torch.float64) / d_model**0.5 for _ in range(n)]


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()
