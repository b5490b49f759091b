"""Grading the learner's function with verify's rule: on the cases it can answer, at sizes it can finish.

Two kinds of function are accepted, and :func:`form_of` says which it found:

* the lab's own form, ``attention_by_hand(q, k, v)``: always causal, as the starter is. It is graded
  on the cases of verify's grid that such a function can answer (:func:`answerable`: causal, no
  ``attn_mask``, the default scale, no dropout, no GQA, no score modifier) -- chosen by the cases'
  fields, so cases added to the grid later are taken or left by the same rule;
* a function with ``F.scaled_dot_product_attention``'s signature: graded on the whole grid.

A loops version is slow (a Python step per query-key pair, and autograd through all of them), so
:func:`per_pair` times one small call first and every case bigger than :data:`CASE_SECONDS` allows is
run smaller (the ratio of its lengths kept) and said so. A level may cut every case further, whatever the
function's speed (``CASE_WORK``: level 1's loops, :func:`within`), so that the check's time does not rest on
the machine's. The verdict is verify's: the tolerance rule
of :mod:`attnlab.judge.oracle`, forward and backward, against the float64 oracle and PyTorch.
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from attnlab.judge import verify as V

from .files import LoadError

SDPA_ARGS = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
CASE_SECONDS = 2.0  # what one graded case may take, forward and backward, on this machine
CASE_TIMEOUT = 10.0  # a case with no answer after this (at the basic case's size) is a FAIL, and the check stops
MAX_WORK = 40_000  # query-key pairs per case at most, however fast the function (the grid's own sizes are below)


def form_of(fn) -> str:
    """"lab" for a (q, k, v) function, "sdpa" for one that takes F.scaled_dot_product_attention's arguments."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature (F.scaled_dot_product_attention): ask it
        q = torch.zeros(1, 1, 2, 2)
        try:
            fn(q, q, q, is_causal=True)
        except TypeError:
            return "lab"
        return "sdpa"
    kinds = inspect.Parameter
    if {p.name for p in params} & set(SDPA_ARGS) or any(p.kind == kinds.VAR_KEYWORD for p in params):
        return "sdpa"
    positional = [p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if len(required) <= 3 and (len(positional) >= 3 or any(p.kind == kinds.VAR_POSITIONAL for p in params)):
        return "lab"
    names = ", ".join(p.name for p in params)
    raise LoadError(f"{getattr(fn, '__name__', 'the function')}({names}) takes neither (q, k, v) nor "
                    "F.scaled_dot_product_attention's arguments (query, key, value, attn_mask, dropout_p, is_causal, "
                    "scale, enable_gqa)")


def answerable(case) -> bool:
    """Can a (q, k, v) function that is always causal answer this case? Causal, no mask, the default scale (not even
    passed as a tensor), no dropout, no GQA, no score modifier, no learnable bias."""
    return (case.is_causal and case.mask is None and case.scale is None and not getattr(case, "scale_tensor", False)
            and case.dropout_p == 0 and (case.Hkv is None or case.Hkv == case.H) and case.mod is None
            and not case.grad_mask)


def as_sdpa(fn):
    """The lab's (q, k, v) function with F.scaled_dot_product_attention's signature, for the judge to call."""
    def lab_form(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or dropout_p or not is_causal or scale is not None or enable_gqa:
            raise TypeError("the lab's (q, k, v) form is always causal, with no mask, scale, dropout or GQA")
        return fn(query, key, value)
    return lab_form


RATE_REPEATS = 3  # calls at each of the two sizes; the least is kept


def per_pair(call) -> float | None:
    """Seconds per query-key pair of a forward and backward call of ``call`` (F.sdpa's signature), from two sizes
    (2 heads x 16 x 16 and x 32 x 32): the difference leaves out the fixed cost of a call, which is all a matrix
    version has at these sizes. Each size is called once to warm up (its first call pays for buffers and kernels
    the smaller one did not need), then :data:`RATE_REPEATS` times, and the least time kept: one call the machine
    stalls (a busy core, a garbage collection) would otherwise read as a function a thousand times slower, and
    shrink cases it could finish. None if the function fails. Run where the function lives (:mod:`.judged`),
    whose judge kills it if it hangs."""
    g = torch.Generator().manual_seed(0)

    def once(T: int) -> float:
        q, k, v = (torch.randn(1, 2, T, 16, generator=g, requires_grad=True) for _ in range(3))
        t0 = time.perf_counter()
        call(q, k, v, is_causal=True).float().sum().backward()
        return time.perf_counter() - t0

    try:
        once(16), once(32)  # the first call at each size pays for warming up
        took = {16: [], 32: []}
        for _ in range(RATE_REPEATS):
            for T in took:
                took[T].append(once(T))
    except Exception:  # a function that cannot run: the grading that follows says why, case by case
        return None
    small, big = min(took[16]), min(took[32])
    return max(big - small, 0.25 * big) / (2 * (32 * 32 - 16 * 16))  # noise can make the difference tiny


def cases(form: str, per_pair: float | None, quick: bool = False, answers=None,
          most: int | None = None) -> tuple[list, list[str]]:
    """The graded cases for a form, each shrunk to what CASE_SECONDS allows at ``per_pair``; and the shrunk ones.
    ``answers``: the cases a level's own form can answer (level 4's (q, k, v, is_causal)); default
    :func:`answerable` for the lab's form, the whole grid for F.sdpa's. ``most``: the query-key pairs a case of
    the level has at most, however fast the function (level 1's loops: :data:`attnlab.lab.levels.loops.CASE_WORK`),
    each case cut to it by :func:`within`, its batch and heads kept."""
    grid = V.default_cases(long=not quick)
    which = answers or (answerable if form in ("lab", "level") else None)
    chosen = [c for c in grid if which(c)] if which is not None else grid
    limit = MAX_WORK if per_pair is None else max(256, min(MAX_WORK, int(CASE_SECONDS / per_pair)))
    if most is not None:
        out = [within(c, min(most, limit)) for c in chosen]
    else:
        out = [c.shrunk(limit) for c in chosen]
    return out, [c.label for c in out if c.name not in {x.name for x in chosen}]


def within(case, most: int):
    """The case at lengths of at most ``most`` query-key pairs in all, as :meth:`Case.shrunk` cuts them (the ratio
    of L to S kept, L = 1 kept, at least 2) but with every batch dimension and head kept: what the case asks --
    its batch and heads, head dims, the causal mask and where it is aligned when L != S, dtype, layout, the size of
    its scores -- is all there at a few dozen positions."""
    if case.work <= most:
        return case
    n, S = math.prod(case.batch) * case.H, case.S or case.L
    f = math.sqrt(most / (n * case.L * S))
    L2 = 1 if case.L == 1 else max(2, int(case.L * f))
    S2 = max(2, int(S * f)) if case.L != 1 else max(2, most // n)
    return replace(case, L=L2, S=S2 if case.S else None, name=f"{case.name} (shrunk: L={L2}, S={S2})")


WHICH = {"lab": "the grid's cases a (q, k, v) function that is always causal can answer: causal, no attn_mask, the "
                "default scale, no dropout, no GQA",
         "level": "the grid's cases the level's function can answer: causal or not, no attn_mask, the default scale, "
                  "no dropout, no GQA",
         "sdpa": "the whole grid"}


def grade(target, name: str, form: str, per_pair: float | None, quick: bool = False, seed: int = 0, progress=None,
          timeout: float = CASE_TIMEOUT, level=None):
    """(verify's result on the graded cases, the cases run smaller, a note saying which cases and why). ``target``:
    the learner's function in F.sdpa's signature (in its own process: a :class:`attnlab.judge.apart.remote.Remote`).
    ``level``: the level's module, which may name its own cases (``cases(quick)``), the cases its form answers
    (``answerable``), cases of its own beside the grid's (``MORE_CASES``) and whether gradients are judged
    (``BACKWARD``, default True)."""
    own = getattr(level, "cases", None)
    most = getattr(level, "CASE_WORK", None)
    if own is not None:
        graded, shrunk, which = own(quick), [], level.CASES_NOTE
    else:
        graded, shrunk = cases(form, per_pair, quick, getattr(level, "answerable", None), most)
        which = WHICH.get(form, WHICH["sdpa"])
    more = list(getattr(level, "MORE_CASES", ()))  # the level's own, beside the grid's
    if more:
        graded, which = graded + more, which + "; and " + ", ".join(c.name for c in more)
    result = V.verify({name: target}, graded, seed=seed, progress=progress, timeout=timeout,
                      check_dropout=True, backward=getattr(level, "BACKWARD", True))
    note = f"{len(graded)} cases: {which}"
    if shrunk and most is not None and (per_pair is None or most <= CASE_SECONDS / per_pair):
        note += (f"; {len(shrunk)} run smaller, at most {most:,} query-key pairs each (their batch, heads and head "
                 f"dims kept): {getattr(level, 'CASE_WHY', 'the level is graded at small sizes')}")
    elif shrunk and per_pair is not None:
        took = f"{per_pair * 1e6:.3g} µs" if per_pair >= 1e-6 else f"{per_pair * 1e9:.3g} ns"
        note += (f"; {len(shrunk)} run smaller to finish in about {CASE_SECONDS:g} s each (your function took "
                 f"{took} per query-key pair, forward and backward)")
    elif shrunk:
        note += f"; {len(shrunk)} run smaller, at most {MAX_WORK:,} query-key pairs each"
    return result, shrunk, note


MATCH_CASE = V.Case("the lesson's causal input", batch=(1,), H=2, L=64, E=32, is_causal=True)


def match(target, seed: int = 0) -> float:
    """max |yours - F.scaled_dot_product_attention| on the lesson's causal input: 2 heads, T = 64, d = 32, float32.
    ``target`` in F.sdpa's signature; PyTorch's answer is computed here, where the learner's code never ran."""
    from attnlab.judge import judge

    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, 64, 32, generator=g) for _ in range(3))
    with torch.no_grad():
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        try:
            mine = judge.call(target, q, k, v, None, MATCH_CASE)
        except Exception:  # the graded cases above say what goes wrong; here it simply does not match
            return float("inf")
    if not isinstance(mine, torch.Tensor) or mine.shape != ref.shape:
        return float("inf")
    return float((mine.double() - ref.double()).abs().max())
