"""Take the causal mask away and you have an encoder.

A decoder (GPT) hides the future: query i may look only at keys j <= i, so the upper triangle of
its attention map is exactly zero. An encoder (BERT) has no mask: every token looks at every
other, before and after it, and the upper triangle fills in. Same scores, same softmax; the only
difference is which keys each row is allowed to see. The last row sees every key either way, so
its output is the same in both; every earlier row changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.explore._common import embed, projections
from attnlab.kernels import matrix
from attnlab.results import Result, machine, versions

WORDS = ["the", "animal", "did", "not", "cross", "the", "street", "because", "it", "was", "tired"]


@dataclass
class NoMaskResult(Result):
    seed: int
    tokens: list[str]
    d_head: int
    causal: list[list[float]]  # (T, T) weights with the causal mask
    bidirectional: list[list[float]]  # (T, T) weights with no mask
    future_mass: list[float]  # per query: weight on keys after it, no mask
    causal_upper_max: float  # largest weight above the diagonal with the mask (0 exactly)
    out_change: list[float]  # per query: max|out_no_mask - out_causal|
    machine: dict
    versions: dict


def run(seed: int = 0, d_model: int = 16, d_head: int = 8) -> NoMaskResult:
    x = embed(WORDS, d_model, seed)  # (T, d_model)
    wq, wk, wv = projections(d_model, d_head, seed + 1)
    q, k, v = x @ wq, x @ wk, x @ wv  # (T, d_head)
    out_c, w_c = matrix.attention(q, k, v, is_causal=True, return_weights=True)
    out_b, w_b = matrix.attention(q, k, v, is_causal=False, return_weights=True)
    T = len(WORDS)
    future = [float(w_b[i, i + 1:].sum()) for i in range(T)]
    upper = max((float(w_c[i, j]) for i in range(T) for j in range(i + 1, T)), default=0.0)
    change = (out_b - out_c).abs().amax(dim=-1).tolist()
    return NoMaskResult(seed, list(WORDS), d_head, w_c.tolist(), w_b.tolist(), future, upper, change,
                        machine(), versions())


def finding(r: NoMaskResult) -> str:
    T = len(r.tokens)
    mean_future = sum(r.future_mass[:-1]) / (T - 1)
    worst = max(range(T), key=lambda i: r.out_change[i])
    return (f"Without the mask every query spends on average {mean_future:.0%} of its attention on later tokens "
            f"(the first word {r.future_mass[0]:.0%}); with it the upper triangle is exactly {r.causal_upper_max:g}. "
            f"Outputs change by up to {max(r.out_change):.3f} (at '{r.tokens[worst]}', position {worst}) and by "
            f"{r.out_change[-1]:.1e} at the last token, which sees every key either way.")


RESULT = NoMaskResult
