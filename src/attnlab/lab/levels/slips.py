"""The slips a learner makes writing attention, each as the output it gives: the learner's output is compared with them.

A slip is named only when the learner's own output, on every probe where the slip's answer differs
from the right one, is the slip's answer (values, not messages): "your function divides by √S"
because it returned exactly what attention divided by √S returns. The probes are small causal
inputs, float64 (where a learner's function computes in float64, the match is to rounding) and one
float32 case with large logits (where a softmax without the max subtraction overflows). The right
answer and every slip's are computed here, in float64, by the judge: never by the learner's code.

Each slip's line says what the learner's function did, in their terms, and what it should do.
"""

from __future__ import annotations

import math

import torch

from attnlab.judge import judge, oracle
from attnlab.judge import verify as V
from attnlab.judge.diagnose import Diagnosis

PROBES = (
    V.Case("probe", batch=(1,), H=2, L=24, E=8, is_causal=True, dtype="float64"),
    V.Case("probe, d = 16", batch=(1,), H=1, L=19, E=16, is_causal=True, dtype="float64"),
    V.Case("probe, large logits", batch=(1,), H=2, L=20, E=8, is_causal=True, dtype="float32", magnitude=30.0),
)

TEXT = {
    "max-subtraction": "large scores overflow in your softmax (NaN or inf where the answer is finite): subtract each "
                       "row's largest score before exp, which overflows float32 near 88",
    "unscaled": "your scores are not scaled: divide each q·k by √d, d = q.shape[-1] (the head width)",
    "scale-sqrt-S": "your function divides the scores by √S, the square root of the number of keys; divide by √d, the "
                    "square root of the head width q.shape[-1]",
    "softmax-dim": "your softmax runs over the wrong axis: your weights add up to 1 down each column (over the "
                   "queries, dim=-2); each query's weights over the keys (dim=-1) must add up to 1",
    "unnormalised": "your weights are never normalised: after exp, divide each query's weights by their sum, so they "
                    "add up to 1",
    "peeks-ahead": "your mask lets query i see one key ahead (key i + 1): query i may see keys 0 .. i only; is a loop "
                   "bound or the j > i test off by one?",
    "causal-reversed": "your mask is turned round: your query i sees itself and the keys after it (j >= i) and none "
                       "before; it should see keys 0 .. i and hide the keys after it (j > i)",
    "diagonal": "your mask also hides the diagonal: query i must see itself, key i (hide j > i, not j >= i)",
    "mask-zero": "your masked scores are set to 0, not -inf: a future key still gets weight exp(0); make them -inf",
    "causal-ignored": "your function has no causal mask yet: query i also sees the keys after it; hide j > i",
    "unscaled+causal-ignored": "your function has neither the scale nor the causal mask yet: divide q·k by √d, then "
                               "hide the keys after each query (j > i)",
}


def _scores(q, k, scale=None):
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return q @ k.transpose(-2, -1) * sc  # (..., L, S)


def _visible(L: int, S: int, shift: int = 0) -> torch.Tensor:
    return torch.ones(L, S, dtype=torch.bool).tril(shift)  # key j visible to query i when j <= i + shift


def _masked_softmax(s, visible, dim=-1):
    w = torch.softmax(s.masked_fill(~visible, -math.inf), dim=dim)
    return torch.nan_to_num(w, nan=0.0)  # a row (or column) with no key: zeros, as PyTorch


def _plain(q, k, v, scale=None, visible=None, dim=-1):
    L, S = q.shape[-2], k.shape[-2]
    return _masked_softmax(_scores(q, k, scale), _visible(L, S) if visible is None else visible, dim) @ v


def _unnormalised(q, k, v, stable: bool):
    s = _scores(q, k).masked_fill(~_visible(q.shape[-2], k.shape[-2]), -math.inf)
    top = s.amax(dim=-1, keepdim=True) if stable else 0.0
    return torch.exp(s - top) @ v


def _mask_zero(q, k, v):
    s = _scores(q, k)
    return torch.softmax(s.masked_fill(~_visible(q.shape[-2], k.shape[-2]), 0.0), dim=-1) @ v


def common():
    """(key, q, k, v -> the slip's output, float64): the slips of attention itself, at every attention level."""
    return [
        ("unscaled", lambda q, k, v: _plain(q, k, v, scale=1.0)),
        ("scale-sqrt-S", lambda q, k, v: _plain(q, k, v, scale=1.0 / math.sqrt(k.shape[-2]))),
        ("softmax-dim", lambda q, k, v: _plain(q, k, v, dim=-2)),
        ("unnormalised", lambda q, k, v: _unnormalised(q, k, v, True)),
        ("unnormalised", lambda q, k, v: _unnormalised(q, k, v, False)),
        ("peeks-ahead", lambda q, k, v: _plain(q, k, v, visible=_visible(q.shape[-2], k.shape[-2], 1))),
        ("causal-reversed", lambda q, k, v: _plain(q, k, v, visible=~_visible(q.shape[-2], k.shape[-2], -1))),
        ("diagonal", lambda q, k, v: _plain(q, k, v, visible=_visible(q.shape[-2], k.shape[-2], -1))),
        ("mask-zero", _mask_zero),
        ("causal-ignored", lambda q, k, v: _plain(q, k, v, visible=torch.ones(q.shape[-2], k.shape[-2], dtype=bool))),
        ("unscaled+causal-ignored", lambda q, k, v: _plain(q, k, v, scale=1.0,
                                                           visible=torch.ones(q.shape[-2], k.shape[-2], dtype=bool))),
    ]


def _tol(case, ref) -> float:
    big = 1.0 + float(ref.abs().max()) if ref.numel() else 1.0
    return (1e-9 if case.dtype == "float64" else 3e-5) * big


def outputs(target, seed: int, probes=PROBES) -> list[tuple]:
    """(case, q, k, v in float64, the learner's output in float64 or None) per probe; ``target`` in F.sdpa's
    signature (the learner's process, or the function itself)."""
    got = []
    for i, case in enumerate(probes):
        x = V.inputs(case, seed + i)
        try:
            with torch.no_grad():
                out = judge.call(target, x.q, x.k, x.v, None, case)
        except Exception:  # a function that raises is told so by the graded cases
            out = None
        ok = isinstance(out, torch.Tensor) and out.shape == x.q.shape[:-1] + x.v.shape[-1:]
        got.append((case, *(t.double() for t in (x.q, x.k, x.v)), out.detach().double().cpu() if ok else None))
    return got


def _held(out):
    """Rows wholly NaN (a row the learner's mask left no key) read as zeros, as the slip's own answer has them."""
    rows = ~torch.isfinite(out).all(dim=-1, keepdim=True)
    whole = bool((torch.isfinite(out) | rows).all())
    return out.masked_fill(rows, 0.0) if whole else out


def named(got, slips) -> list[str]:
    """The keys of the slips whose answers the learner's outputs are, in the order of ``slips``."""
    found = []
    live = [(c, q, k, v, o) for c, q, k, v, o in got if o is not None]
    if not live:
        return found
    right = [oracle.reference(q, k, v, is_causal=True) for _, q, k, v, _ in live]
    over = [c.magnitude > 1 and bool((~torch.isfinite(o) & torch.isfinite(r)).any())
            for (c, *_, o), r in zip(live, right, strict=True)]
    calm = [not c.magnitude > 1 for c, *_ in live]
    if any(over) and all(bool(torch.isfinite(o).all()) for (*_, o), ok in zip(live, calm, strict=True) if ok):
        found.append("max-subtraction")
    for key, slip in slips:
        if key in found:
            continue
        differs = 0
        for (case, q, k, v, o), r in zip(live, right, strict=True):
            alt = slip(q, k, v)
            if alt is None:
                continue
            tol = _tol(case, alt)
            if float((alt - r).abs().max()) <= 10 * tol:
                continue  # on this probe the slip gives the right answer: it says nothing
            held = _held(o)
            if not bool(torch.isfinite(held).all()) or float((held - alt).abs().max()) > tol:
                differs = -1
                break
            differs += 1
        if differs > 0:
            found.append(key)
    return found


def diagnoses(keys, text=TEXT) -> list[Diagnosis]:
    seen = dict.fromkeys(keys)
    return [Diagnosis(k, text[k]) for k in seen]
