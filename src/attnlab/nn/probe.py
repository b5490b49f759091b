"""Look inside the softmax: how spread out is each head's attention?

For one query, the weights w_1 .. w_S over its keys are a probability distribution. Two numbers
describe how peaked it is:

* **entropy** H = -sum_j w_j log w_j (in nats). Uniform over S keys gives log S, the most it can
  be; all weight on one key gives 0. A saturated softmax -- the lesson's warning about dropping
  the 1/sqrt(d) scale -- shows up as entropy near 0.
* **peak weight** max_j w_j: 1/S when uniform, 1 when saturated.

And one number for learning: :func:`score_grad_norms`, the size of the loss's gradient with
respect to the scores s = scale * q . k, i.e. what flows back *through* the softmax. Its Jacobian
diag(w) - w w^T is zero for a one-hot w: a saturated softmax passes (almost) no gradient.

In a causal layer query i sees i + 1 keys, so its entropy is at most log(i + 1); averaged over the
rows of a length-T sequence, uniform attention gives :func:`uniform_causal_entropy` (T).

The weights come from the matrix form (the only form that keeps them), whatever form the model
trains with, so training can run on a fast form and still be probed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.kernels.argcheck import positive_int

from .attention import MultiHeadAttention


def entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy of each row of ``weights`` (..., L, S) -> (..., L), in nats (0 log 0 = 0)."""
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


def uniform_causal_entropy(T: int) -> float:
    """Mean over queries 0..T-1 of log(i + 1): a causal head that attends uniformly."""
    positive_int("T", T)
    return sum(math.log(i + 1) for i in range(T)) / T


@dataclass
class ProbeResult:
    """Per layer and head, averaged over the batch and every query row."""

    entropy: list[list[float]]  # [layer][head], nats
    peak: list[list[float]]  # [layer][head], mean max weight

    def layer_entropy(self) -> list[float]:
        """Mean entropy per layer (over its heads)."""
        return [sum(h) / len(h) for h in self.entropy]

    def layer_peak(self) -> list[float]:
        return [sum(h) / len(h) for h in self.peak]


def head_stats(weights: torch.Tensor) -> tuple[list[float], list[float]]:
    """(entropy per head, mean peak weight per head) for weights (B, H, L, S)."""
    if not isinstance(weights, torch.Tensor) or weights.dim() != 4:
        raise ValueError("weights must be a tensor of shape (B, H, L, S)")
    w = weights.double()
    ent = entropy(w).mean(dim=(0, 2))  # (H,)
    peak = w.amax(dim=-1).mean(dim=(0, 2))  # (H,)
    return ent.tolist(), peak.tolist()


@torch.no_grad()
def probe(model: nn.Module, *inputs, **kwargs) -> ProbeResult:
    """Run ``model(*inputs, **kwargs)`` once and measure every :class:`MultiHeadAttention` in it, in order.

    A hook catches each attention layer's input and recomputes that layer's weights with the
    matrix form. The model is put in eval mode for the probe (no dropout) and restored after.
    """
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise ValueError("model has no MultiHeadAttention layers to probe")
    found: dict[int, tuple[list[float], list[float]]] = {}

    def hook(index):
        def fn(module, args):
            found[index] = head_stats(module.attention_weights(args[0]))
        return fn

    handles = [m.register_forward_pre_hook(hook(i)) for i, m in enumerate(layers)]
    was_training = model.training
    model.eval()
    try:
        model(*inputs, **kwargs)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    missing = [i for i in range(len(layers)) if i not in found]
    if missing:
        raise ValueError(f"attention layers {missing} did not run in the model's forward")
    return ProbeResult(entropy=[found[i][0] for i in range(len(layers))],
                       peak=[found[i][1] for i in range(len(layers))])


def score_grad_norms(model: nn.Module, loss_fn: Callable[[], torch.Tensor]) -> list[float]:
    """||d loss / d scores|| for every :class:`MultiHeadAttention` in ``model``, in order.

    ``loss_fn()`` runs the model and returns a scalar loss. For this one pass each layer computes
    its attention explicitly and keeps its scores; gradients are left in the parameters' ``.grad``.
    """
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise ValueError("model has no MultiHeadAttention layers to probe")
    for m in layers:
        m.keep_scores, m.scores = True, None
    try:
        loss_fn().backward()
        norms = []
        for i, m in enumerate(layers):
            if m.scores is None or m.scores.grad is None:
                raise ValueError(f"attention layer {i} did not take part in the loss")
            norms.append(float(m.scores.grad.norm()))
        return norms
    finally:
        for m in layers:
            m.keep_scores, m.scores = False, None
