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

KEY = "bwd-half"  # the cause's key; a row names the steps that fit as its variants: bwd-half=dP@bfloat16
SAME = 0.8  # the least cosine between the model's gradient error and the function's
TIED = 0.05  # models this close to the best cosine are said beside it
BAND = 2.0  # the function's error within this factor of the model's
SPREAD = 8.0  # the least number of entries (participation ratio) a model's error is spread over, to be read
MARGIN = 2.0  # a model fails a gradient the function fails by at least 1/MARGIN of its limit, passes the others
GRADS = ("dq", "dk", "dv")
STEPS = {  # step -> what is rounded, in the words of a line
    "dP": "dP = dO Vᵀ rounded to {dt}",
    "dP-operands": "dP = dO Vᵀ taken from dO and V cast to {dt}",
    "D": "D = rowsum(dO ∘ O) taken from the output saved in {dt}",
    "dS": "dS = P ∘ (dP − D) rounded to {dt} before dQ and dK",
    "P": "the weights P recomputed for the backward in {dt}",
    "lse": "the log-sum-exp saved for the backward in {dt}, the weights recomputed from it",
    "dO": "dO cast to {dt}",
}
NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def variant(step: str, dtype: torch.dtype) -> str:
    return f"{KEY}={step}@{NAMES[dtype]}"


def words(variant_text: str) -> str:
    """A variant's step in words: "dP@bfloat16" -> "dP = dO Vᵀ rounded to bfloat16"."""
    step, dt = variant_text.split("@", 1)
    return STEPS[step].format(dt=dt)


def dtypes(case_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """The roundings a call in ``case_dtype`` can lose by: half precision for float32 and float64, float32 for
    float64 too; none for a half-precision call, whose own tolerance is a half rounding's."""
    if case_dtype == torch.float64:
        return torch.bfloat16, torch.float16, torch.float32
    return (torch.bfloat16, torch.float16) if case_dtype == torch.float32 else ()


def models(args: dict, grad_out: torch.Tensor, dts) -> dict[tuple[str, torch.dtype], tuple]:
    """(step, dtype) -> (dq, dk, dv) of the oracle's backward with that step rounded to dtype; (None, None) -> the
    backward with nothing rounded (the oracle's gradients again: what the models are checked against)."""
    (q, k, v), f = oracle.traced(**args)
    out = oracle.unflatten(f.out, f)
    (dO,) = torch.autograd.grad(out, f.out, grad_out.detach().double().cpu().reshape(out.shape), retain_graph=True)
    P, O, V, S, lse = (t.detach() for t in (f.P, f.out, f.v, f.scores, f.lse))
    dead = torch.isneginf(lse)[..., None]

    def r(t, dt):
        return t.to(dt).double()

    def grads(step=None, dt=None):
        Pb = r(P, dt) if step == "P" else P
        if step == "lse":
            Pb = torch.where(dead, 0.0, torch.exp(S - torch.where(dead, 0.0, r(lse, dt)[..., None])))
        dOb = r(dO, dt) if step == "dO" else dO
        dP = r(dOb, dt) @ r(V, dt).transpose(-2, -1) if step == "dP-operands" else dOb @ V.transpose(-2, -1)
        dP = r(dP, dt) if step == "dP" else dP
        D = (dOb * (r(O, dt) if step == "D" else O)).sum(-1, keepdim=True)
        dS = Pb * (dP - D)
        dS = r(dS, dt) if step == "dS" else dS
        dV = Pb.transpose(-2, -1) @ dOb
        g = torch.autograd.grad([f.scores, f.v], [q, k, v], [torch.where(torch.isneginf(S), 0.0, dS), dV],
                                retain_graph=True, allow_unused=True)
        return tuple(torch.zeros_like(t) if x is None else x for t, x in zip((q, k, v), g, strict=True))

    found = {(None, None): grads()}
    for dt in dts:
        for step in STEPS:
            found[(step, dt)] = grads(step, dt)
    return found


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


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    na, nb = a.norm().item(), b.norm().item()
    return (a @ b).item() / (na * nb) if na > 0 and nb > 0 else 0.0


def cause(case_dtype: torch.dtype, args: dict, grad_out: torch.Tensor, mine: dict, ref: dict, comps) -> list[str]:
    """The hints of a case whose output passes and whose gradients fail: ``[KEY, variant, ...]`` for the steps whose
    model fits (:func:`fits`), the best first; [] where none does. ``mine``/``ref``: the function's and the oracle's
    gradients by name (dq, dk, dv); ``comps``: the case's comparisons (which failed, and their limits)."""
    dts = dtypes(case_dtype)
    by = {c.quantity: c for c in comps if c.quantity in GRADS}
    failed = [n for n, c in by.items() if not c.passed]
    if not dts or not failed or any(n not in mine or n not in ref for n in by):
        return []
    if any(mine[n] is None or mine[n].shape != ref[n].shape or not torch.isfinite(mine[n]).all() for n in by):
        return []
    found = models(args, grad_out, dts)
    plain = dict(zip(GRADS, found.pop((None, None)), strict=True))
    if any(rule.max_err(plain[n], ref[n]) > 0.1 * by[n].allowed for n in by):  # the model's backward is not the
        return []  # oracle's (a case it does not describe): it places nothing
    fitting = fits(found, mine, ref, by, failed)
    if not fitting:
        return []
    best = fitting[0][0]
    return [KEY, *(variant(step, dt) for c, (step, dt) in fitting if c >= best - TIED)]


def fits(found: dict, mine: dict, ref: dict, by: dict, failed: list[str]) -> list[tuple[float, tuple]]:
    """(cosine, (step, dtype)) of the models that fit, best first: error in the function's direction and of its
    size, failing the gradients it fails and passing the ones it passes."""
    e_mine = _error(mine, ref, failed)
    out = []
    for key, g in found.items():
        model = dict(zip(GRADS, g, strict=True))
        errs = {n: rule.max_err(model[n], ref[n]) for n in by}
        if any(errs[n] < by[n].allowed / MARGIN if n in failed else errs[n] > by[n].allowed * MARGIN for n in by):
            continue  # it would not fail what fails, or would fail what passes
        e_model = _error(model, ref, failed)
        c = _cosine(e_mine, e_model)
        size = e_mine.norm().item() / max(e_model.norm().item(), 1e-300)
        if c >= SAME and 1 / BAND <= size <= BAND and math.isfinite(size) and _spread(e_model) >= SPREAD:
            out.append((c, key))
    return sorted(out, key=lambda x: -x[0])
