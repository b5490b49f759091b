"""How much arithmetic one attention call does: the one FLOP formula every report uses.

Attention is two matrix multiplies. ``q @ kᵀ`` makes an L x S matrix of scores, each a dot product
of length d: L·S·d multiply-adds, which is 2·L·S·d floating-point operations. ``weights @ v`` costs
the same again. Per batch element and head that is 4·L·S·d, so the forward pass costs

    FLOPs = 4 · B · H · L · S · d

The softmax, the scale and the mask are a few operations per score -- small next to the ``d``
of each dot product -- and are not counted, as FlashAttention's papers and benchmarks do not.

* causal: only the keys at or before each query count, about half the matrix: x 1/2;
* backward: four matrix multiplies of the same size (dv, d(weights), dq, dk) plus the scores
  recomputed, as FlashAttention does: x 2.5 the forward. Forward and backward timed together are
  therefore 1 + 2.5 = 3.5 times the forward (FlashAttention's ``fwd_bwd`` count).

Dividing by the time of a call gives FLOP/s: a rate you can compare with what the machine's matrix
multiply can reach (its peak), and between forms that do the same work in different ways.
"""

from __future__ import annotations

from attnlab.kernels.argcheck import positive_int

MODES = {"forward": 1.0, "backward": 2.5, "forward+backward": 3.5}


def attention_flops(batch: int, heads: int, L: int, S: int, head_dim: int, *, causal: bool = False,
                    mode: str = "forward") -> float:
    """FLOPs of one attention call: 4·B·H·L·S·d, x 1/2 when causal, x 2.5 for the backward pass.

    ``mode`` is what was timed: ``"forward"`` (x 1), ``"backward"`` (x 2.5) or
    ``"forward+backward"`` (x 3.5).
    """
    for name, value in (("batch", batch), ("heads", heads), ("L", L), ("S", S), ("head_dim", head_dim)):
        positive_int(name, value, owner="attention_flops")
    if mode not in MODES:
        raise ValueError(f"attention_flops mode must be one of {', '.join(MODES)}, got {mode!r}")
    flops = 4.0 * batch * heads * L * S * head_dim
    if causal:
        flops *= 0.5
    return flops * MODES[mode]


def matmul_flops(m: int, n: int, k: int) -> float:
    """FLOPs of an (m, k) @ (k, n) matrix multiply: one multiply and one add per term."""
    return 2.0 * m * n * k
