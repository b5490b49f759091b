"""The log-sum-exp flash kernels return, held to the same rule as the output.

For each query row, ``lse_i = log sum_j exp(s_ij)`` over the row's scaled scores after the score modifier and the
mask (masked scores are -inf), before dropout: the statistic a flash kernel keeps to finish its softmax and to run
its backward, and what ring attention merges. The oracle's is computed in float64 by the oracle itself
(:attr:`attnlab.judge.oracle.Forward.lse`). **A row that sees no key has lse = -inf**, the log of an empty sum,
as FlexAttention returns it; FlashAttention 2's CUDA kernel writes +inf there instead (so that its backward's
``exp(s - lse)`` is 0), and either infinity is accepted on those rows. Anything finite, or NaN, fails.

On the other rows the rule is the output's: ``max|yours - oracle| <= 2 x max|PyTorch - oracle| + floor``.
PyTorch's public functions return no log-sum-exp, so its side is ``torch.logsumexp`` over PyTorch's own scores
in the case's dtype -- with float32 statistics for float16 and bfloat16, as every flash kernel keeps them (the
matmul of half inputs accumulated in float32). The floor is the scores' rounding error on the row
(:func:`attnlab.judge.rule.score_error`), plus ``u sqrt(S)`` for the sum, plus twice the error of storing the
answer in float32 (float64 for float64 inputs, unless the function returns it in float32, as FlashAttention's
interface documents its softmax_lse: then float32's storing error, which a float32 lse computed in float32 still
exceeds).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from attnlab.judge import oracle, rule
from attnlab.judge.cases import DTYPES, Case
from attnlab.judge.facts import Cause
from attnlab.kernels import mods

HALF = (torch.float16, torch.bfloat16)
CAUSES = (
    Cause('lse-unscaled', "the log-sum-exp leaves out the softmax scale (the max kept in q.k's own units, or the "
                          "log-sum-exp of q.k itself): lse_i = log sum_j exp(scale * q_i.k_j), on the scaled scores"),
    Cause('lse-shift', "the log-sum-exp leaves out the row's max: a kernel that keeps m and l = sum exp(s - m) "
                       "returns m + log l, not log l"),
    Cause('lse-only', 'only the log-sum-exp fails: the output (and the gradients) are right; lse_i = log sum_j '
                      "exp(s_ij), the natural log over row i's scaled, modified and masked scores, in float32"),
    Cause('lse-base2', 'the log-sum-exp is in base 2 (as a kernel working in exp2 keeps it): the API returns the '
                       'natural log; multiply by ln 2'),
    Cause('lse-dead-rows', 'the log-sum-exp of a row that sees no key is wrong: without sinks the log of an empty '
                           "sum is -inf (FlashAttention's kernel writes +inf there; either is accepted), with sinks "
                           "it is the row's sink, log(0 + exp(sinks[h])) -- not -inf, and not NaN"),
)


def store_dtype(case: Case) -> torch.dtype:
    return torch.float64 if DTYPES[case.dtype] == torch.float64 else torch.float32


def floor(case: Case, f: oracle.Forward) -> float:
    """The lse's rounding budget on the rows that see a key (the storing is :func:`rule.compare`'s)."""
    dt = DTYPES[case.dtype]
    u = torch.finfo(torch.float32 if dt in HALF else dt).eps
    live = torch.isfinite(f.lse)
    if not live.any():
        return 0.0
    bound = rule.score_error(f, u)[..., 0] + u * math.sqrt(f.k.shape[2])  # (N, H, L)
    if f.sinks is not None:  # the sink is one more term, rounded as a score is when a kernel moves it to exp2's
        bound = bound + 2 * u * f.sinks.abs()  # units and back (sink * log2 e, then the lse * ln 2)
    return float(bound[live].max())


def pytorch(case: Case, x, fresh) -> torch.Tensor:
    """PyTorch's log-sum-exp on the case's device, (N, H, L) float32 (or float64)."""
    dt = DTYPES[case.dtype]
    work = torch.float32 if dt in HALF else dt
    q, k, _, _ = oracle._broadcast(*(t.detach().to(work) for t in (x.q, x.k, x.v)), case.gqa)  # (N, H, L, E)...
    N, H, L, E = q.shape
    G = H // k.shape[1] if k.shape[1] else 1
    k = k.repeat_interleave(G, dim=1)
    S = k.shape[2]
    sc = 1.0 / math.sqrt(E) if case.scale is None else float(case.scale)
    s = q @ k.transpose(-2, -1) * sc  # (N, H, L, S)
    mod, _ = fresh(work, q.device)
    if mod is not None:
        s = mods.apply_dense(mods.as_mod(mod), s)
    m = x.dense
    if m is not None:
        full = (*case.batch, H, L, S)
        m = m.to(q.device).expand(full).reshape(N, H, L, S)
        s = s.masked_fill(~m, -math.inf) if m.dtype == torch.bool else s + m.to(work)
    if case.is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool, device=q.device).tril(), -math.inf)
    if x.sinks is not None:  # the sink one more term of each row's sum (attnlab.judge.sink_cases)
        s = torch.cat([s, x.sinks.to(q.device, work).view(1, H, 1, 1).expand(N, H, L, 1)], dim=-1)
    return torch.logsumexp(s, dim=-1)


def extend(case: Case, x, exp, n: int) -> dict:
    """The fields of the judge's ``Expected`` for an API case: its first ``n`` quantities (the output, and the
    gradients where the API has a backward), then the log-sum-exp -- the oracle's, PyTorch's, and its floor."""
    f = exp.fwd  # the case's one oracle forward (judge.expect), which computes the lse with the rest
    theirs_lse = pytorch(case, x, exp.fresh)
    theirs = [(*t[:n], theirs_lse) for t in exp.theirs] if isinstance(exp.theirs, list) else \
        (*exp.theirs[:n], theirs_lse)
    return {"ref": (*exp.ref[:n], f.lse), "ref0": (*exp.ref0[:n], f.lse), "theirs": theirs,
            "budget": {**exp.budget, "lse": floor(case, f)}}


def compare(mine, theirs: torch.Tensor, ref: torch.Tensor, case: Case, rounding: float) -> rule.Comparison:
    """The rule on the rows that see a key; on the others (oracle -inf) either infinity passes."""
    theirs, dead = theirs.detach().double().cpu(), torch.isneginf(ref)
    if not isinstance(mine, torch.Tensor) or mine.shape != ref.shape:  # failed, against the limit computed
        return rule.compare("lse", None, theirs[~dead], ref[~dead], store_dtype(case), rounding)
    store = torch.float32 if mine.dtype == torch.float32 else store_dtype(case)  # FlashAttention's own dtype for it
    mine = mine.detach().double().cpu()
    c = rule.compare("lse", mine[~dead], theirs[~dead], ref[~dead], store, rounding)
    if bool(torch.isinf(mine[dead]).all()):
        return c
    return replace(c, err=math.inf, passed=False)


LOG2E = 1.0 / math.log(2.0)


def hints(mine, ref: torch.Tensor, f: oracle.Forward | None = None, rows: torch.Tensor | None = None) -> list[str]:
    """The wrong log-sum-exps a failing one matches (keys of :func:`attnlab.judge.causes.table`): in base 2
    (``log2 sum 2^(s log2 e)``, what a kernel working in exp2 keeps), without the softmax scale (a kernel keeping
    the max of q.k in its own units, m + log l, or the log-sum-exp of q.k itself), without the row max added back
    (log l), or right on every row that sees a key but finite or NaN on the rows that see none. ``f``: the case's
    oracle forward, whose weights give each row's largest score. ``rows`` (..., L): read only these (the rows whose
    output is right, where the output has causes of its own: the formula's causes alone); None: every row. With
    sinks: the sink left out of it (:func:`attnlab.judge.sink_causes.lse_without_sink`)."""
    if not isinstance(mine, torch.Tensor) or mine.shape != ref.shape:
        return []
    from attnlab.judge import sink_causes

    if f is not None and f.sinks is not None:  # with sinks: the sink left out, or a keyless row's lse wrong
        return sink_causes.lse_hints(mine, ref, f, rows)
    m = mine.detach().double().cpu()
    dead = torch.isneginf(ref)
    if rows is not None and rows.numel() != dead.numel():
        return []  # (rows that do not line up with the lse's: nothing to read)
    live = ~dead if rows is None else ~dead & rows.reshape(dead.shape).to(dead.device)
    if rows is not None and not live.any():
        return []
    if not live.any():
        return [] if bool(torch.isinf(m).all()) else ["lse-dead-rows"]
    r, x = ref[live], m[live]
    near = 1e-2 * (1 + r.abs())  # far coarser than any dtype's rule: these say which formula, not how well

    def like(alt) -> bool:
        return bool(((x - alt).abs() <= near).all()) and bool(((alt - r).abs() > near).any())

    if like(r * LOG2E):
        return ["lse-base2"]
    if f is not None:
        top = (ref + f.P.amax(dim=-1).log())[live]  # each row's largest score: lse + log max_j P_ij
        s = torch.where(f.P > 0, f.P.log() + torch.where(dead, 0.0, ref)[..., None], -math.inf)
        raw = torch.logsumexp(s / f.scale, dim=-1)[live] if f.scale > 0 else None
        if like(r - top + top / f.scale) or (raw is not None and like(raw)):
            return ["lse-unscaled"]
        if like(r - top):
            return ["lse-shift"]
    if rows is None and bool(((x - r).abs() <= near).all()) and dead.any() and not bool(torch.isinf(m[dead]).all()):
        return ["lse-dead-rows"]
    return []
