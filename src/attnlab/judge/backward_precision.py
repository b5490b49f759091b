"""Precision lost in the backward alone, placed: the output right, the gradients off by one step rounded down.

A backward keeps its own intermediates -- dP = dO Vᵀ, the row sums D = rowsum(dO ∘ O) from the saved output, the
weights recomputed from the saved log-sum-exp, dS = P ∘ (dP − D) -- and a kernel that stores one of them in
bfloat16 (or a float64 call's in float32) fails its gradients by that rounding while its output passes. The size of
the error alone cannot say so: a formula off by a fraction of a percent fails by as much, in float32 and float64
alike. What a rounding has that a formula error has not is its *pattern*: rounding is deterministic, so the same
step rounded in float64 on the case's own inputs (:func:`models`) gives gradients whose error points where the
function's does, entry by entry. A step is named only where its model's error has at least :data:`SAME` cosine
with the function's, the same size within :data:`BAND`, and fails the gradients the function fails and no other.

Each model is the oracle's backward written out (dV = Pᵀ dO, dP = dO Vᵀ, D, dS = P ∘ (dP − D)) with one step
rounded through ``Tensor.to(dtype)``, its dS and dV taken back to q, k and v through the oracle's own graph
(:func:`attnlab.judge.oracle.traced`): the scale, a score modifier's derivative, the mask and the head map are the
oracle's, whatever the API.
"""

from __future__ import annotations

import math

import torch

from attnlab.judge import oracle, rule
from attnlab.judge.precision import cosine

KEY = "bwd-half"  # the cause's key; a row names the steps that fit as its variants: bwd-half=dP@bfloat16
SAME = 0.8  # the least cosine between the model's gradient error and the function's
TIED = 0.05  # models this close to the best cosine are said beside it
BAND = 2.0  # the function's error within this factor of the model's
SPREAD = 8.0  # the least number of entries (participation ratio) a model's error is spread over, to be read
MARGIN = 2.0  # a model fails a gradient the function fails by at least 1/MARGIN of its limit, passes the others
GRADS = ("dq", "dk", "dv", "dmask")
TILES = (16, 32, 64, 128)  # the tiles an accumulator is modelled over (and once, over the whole length)
STEPS = {  # step -> what is rounded, in the words of a line
    "dP": "dP = dO Vᵀ rounded to {dt}",
    "dP-operands": "dP = dO Vᵀ taken from dO and V cast to {dt}",
    "D": "D = rowsum(dO ∘ O) taken from the output saved in {dt}",
    "dS": "dS = P ∘ (dP − D) rounded to {dt} before dQ and dK",
    "dS-operands": "dQ = dS K and dK = dSᵀ Q taken from dS, K and Q cast to {dt}",
    "P": "the weights P recomputed for the backward in {dt}",
    "lse": "the log-sum-exp saved for the backward in {dt}, the weights recomputed from it",
    "dO": "dO cast to {dt}",
}
ACCUMULATED = {  # an accumulator kept in a half dtype between tiles: over which tiles, and which gradients
    "dq-acc": ("dq accumulated in {dt} across key tiles{tile}", -1, ("dq",)),
    "dkv-acc": ("dk and dv accumulated in {dt} across query tiles{tile}", -2, ("dk", "dv")),
}
NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def variant(step: str, dtype: torch.dtype) -> str:
    return f"{KEY}={step}@{NAMES[dtype]}"


def words(variant_text: str) -> str:
    """A variant's step in words: "dP@bfloat16" -> "dP = dO Vᵀ rounded to bfloat16"; "dq-acc:64@bfloat16" -> "dq
    accumulated in bfloat16 across key tiles of 64"."""
    step, dt = variant_text.split("@", 1)
    if ":" in step:
        step, tile = step.split(":", 1)
        tile = tile.removesuffix("/scale")  # (the sum kept in q.k's units, scaled at the end: the same step)
        return ACCUMULATED[step][0].format(dt=dt, tile=" (rounded once, at the end)" if tile == "once" else
                                           f" of {tile}")
    return STEPS[step].format(dt=dt)


def dtypes(case_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """The roundings a call in ``case_dtype`` can lose by: half precision for float32 and float64, float32 for
    float64 too; none for a half-precision call, whose own tolerance is a half rounding's."""
    if case_dtype == torch.float64:
        return torch.bfloat16, torch.float16, torch.float32
    return (torch.bfloat16, torch.float16) if case_dtype == torch.float32 else ()


def _r(t: torch.Tensor, dt) -> torch.Tensor:
    return t.to(dt).double()


class Backward:
    """The oracle's backward on a case, written out step by step, each step able to be rounded: its weights P, output
    O, values V, scores and lse from the oracle's forward, dO the output's gradient in the forward's layout; dS and
    dV go back to the inputs through the oracle's own graph."""

    def __init__(self, args: dict, grad_out: torch.Tensor):
        self.leaves, f = oracle.traced(**args)
        self.modified = args.get("score_mod") is not None  # (dS's operands: modelled where q·kᵀ is the score)
        out = oracle.unflatten(f.out, f)
        (self.dO,) = torch.autograd.grad(out, f.out, grad_out.detach().double().cpu().reshape(out.shape),
                                         retain_graph=True)
        self.f = f
        self.P, self.O, self.V, self.S, self.lse = (t.detach() for t in (f.P, f.out, f.v, f.scores, f.lse))
        self.names = GRADS[:len(self.leaves)]

    def parts(self, step=None, dt=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(dS, dV) with ``step`` rounded to ``dt`` (none: the oracle's)."""
        P, dO, V, O = self.P, self.dO, self.V, self.O
        if step == "P":
            P = _r(P, dt)
        if step == "lse":
            dead = torch.isneginf(self.lse)[..., None]
            P = torch.where(dead, 0.0, torch.exp(self.S - torch.where(dead, 0.0, _r(self.lse, dt)[..., None])))
        dO = _r(dO, dt) if step == "dO" else dO
        dP = _r(dO, dt) @ _r(V, dt).transpose(-2, -1) if step == "dP-operands" else dO @ V.transpose(-2, -1)
        dP = _r(dP, dt) if step == "dP" else dP
        dS = P * (dP - (dO * (_r(O, dt) if step == "D" else O)).sum(-1, keepdim=True))
        dS = _r(dS, dt) if step == "dS" else dS
        return torch.where(torch.isneginf(self.S), 0.0, dS), P.transpose(-2, -1) @ dO

    def back(self, dS: torch.Tensor, dV: torch.Tensor) -> dict[str, torch.Tensor]:
        """The inputs' gradients of dS (on the scores) and dV (on the values each query head reads)."""
        g = torch.autograd.grad([self.f.scores, self.f.v], self.leaves, [dS, dV], retain_graph=True,
                                allow_unused=True)
        return {n: torch.zeros_like(t) if x is None else x
                for n, t, x in zip(self.names, self.leaves, g, strict=True)}

    def steps(self, dts) -> dict:
        """(variant text, dtype) -> the gradients with that step rounded, for each step and dtype."""
        return {(s, dt): self.operands(dt) if s == "dS-operands" else self.back(*self.parts(s, dt))
                for dt in dts for s in STEPS if not (s == "dS-operands" and self.modified)}

    def operands(self, dt) -> dict[str, torch.Tensor]:
        """The gradients with dQ = dS K · scale and dK = dSᵀ Q · scale taken from dS, K and Q cast to ``dt`` (each
        query head's own key head; the head map summed back by the oracle's graph)."""
        dS, dV = self.parts()
        f, dSr = self.f, _r(dS, dt)
        dq = dSr @ _r(f.k.detach(), dt) * f.scale
        dk = dSr.transpose(-2, -1) @ _r(f.q.detach(), dt) * f.scale
        g = torch.autograd.grad([f.q, f.k, f.v], self.leaves, [dq, dk, dV], retain_graph=True, allow_unused=True)
        return {n: torch.zeros_like(t) if x is None else x
                for n, t, x in zip(self.names, self.leaves, g, strict=True)}

    def accumulated(self, dts, names) -> dict:
        """The same for the accumulators of the gradients in ``names``: each tile's part in full precision, the sum
        kept in ``dt`` after each tile (dq over key tiles, dk and dv over query tiles)."""
        dS, dV = self.parts()
        whole = self.back(dS, dV)
        out = {}
        for step, (_, dim, grads) in ACCUMULATED.items():
            if not set(grads) & set(names):
                continue
            n = dS.shape[dim]
            tiles = [t for t in TILES if t < n] + [n]
            for t in tiles:
                pieces = []
                for lo in range(0, n, t):
                    keep = torch.zeros(n, dtype=torch.bool)
                    keep[lo:lo + t] = True
                    if dim == -1:  # the key tile's columns of dS: its part of dq
                        pieces.append(self.back(dS * keep, torch.zeros_like(dV)))
                    else:  # the query tile's rows: its part of dk and dv
                        rows = keep[:, None]
                        pieces.append(self.back(dS * rows, (self.P * rows).transpose(-2, -1) @ self.dO))
                for dt in dts:
                    for unit in (1.0, self.f.scale):  # the sum kept scaled, or in q.k's units (scaled at the end)
                        acc = {g: None for g in grads}
                        for piece in pieces:
                            acc = {g: _r(piece[g] / unit if a is None else a + piece[g] / unit, dt)
                                   for g, a in acc.items()}
                        tag = "" if unit == 1.0 else "/scale"
                        out[(f"{step}:{'once' if t == n else t}{tag}", dt)] = {**whole,
                                                                              **{g: a * unit for g, a in acc.items()}}
        return out


def _error(grads: dict, ref: dict, names) -> torch.Tensor:
    """The gradients' errors as one vector, each quantity's scaled by its answer's size (each counts alike)."""
    parts = [((grads[n].double().cpu() - ref[n]) / max(ref[n].abs().max().item(), 1e-300)).flatten() for n in names]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def _spread(e: torch.Tensor) -> float:
    """How many entries an error is spread over (its participation ratio, (Σe²)² / Σe⁴): a rounding's error is
    spread over many; where it sits in one or two (weights near one-hot), any error in those entries points its way
    and the direction tells nothing."""
    e2 = e.double() ** 2
    s4 = (e2**2).sum().item()
    return e2.sum().item() ** 2 / s4 if s4 > 0 else 0.0


def cause(case_dtype: torch.dtype, args: dict, grad_out: torch.Tensor, mine: dict, ref: dict, comps) -> list[str]:
    """The hints of a case whose output passes and whose gradients fail: ``[KEY, variant, ...]`` for the steps whose
    model fits (:func:`fits`), the best first; [] where none does. ``mine``/``ref``: the function's and the oracle's
    gradients by name (dq, dk, dv, dmask); ``comps``: the case's comparisons (which failed, and their limits). The
    accumulators are modelled only where no single step fits."""
    dts = dtypes(case_dtype)
    by = {c.quantity: c for c in comps if c.quantity in GRADS}
    failed = [n for n, c in by.items() if not c.passed]
    if not dts or not failed or any(n not in mine or n not in ref for n in by):
        return []
    if any(mine[n] is None or mine[n].shape != ref[n].shape or not torch.isfinite(mine[n]).all() for n in by):
        return []
    bw = Backward(args, grad_out)
    if set(by) - set(bw.names):
        return []
    plain = bw.back(*bw.parts())
    if any(rule.max_err(plain[n], ref[n]) > 0.1 * by[n].allowed for n in by):  # the model's backward is not the
        return []  # oracle's (a case it does not describe): it places nothing
    fitting = fits(bw.steps(dts), mine, ref, by, failed) or fits(bw.accumulated(dts, failed), mine, ref, by, failed)
    if not fitting:
        return []
    best = fitting[0][0]
    return [KEY, *(variant(step, dt) for c, (step, dt) in fitting if c >= best - TIED)]


def fits(found: dict, mine: dict, ref: dict, by: dict, failed: list[str]) -> list[tuple[float, tuple]]:
    """(cosine, (step, dtype)) of the models that fit, best first: error in the function's direction and of its
    size, failing the gradients it fails and passing the ones it passes."""
    e_mine = _error(mine, ref, failed)
    out = []
    for key, model in found.items():
        errs = {n: rule.max_err(model[n], ref[n]) for n in by}
        if any(errs[n] < by[n].allowed / MARGIN if n in failed else errs[n] > by[n].allowed * MARGIN for n in by):
            continue  # it would not fail what fails, or would fail what passes
        e_model = _error(model, ref, failed)
        c = cosine(e_mine, e_model)
        size = e_mine.norm().item() / max(e_model.norm().item(), 1e-300)
        if c >= SAME and 1 / BAND <= size <= BAND and math.isfinite(size) and _spread(e_model) >= SPREAD:
            out.append((c, key))
    return sorted(out, key=lambda x: -x[0])
