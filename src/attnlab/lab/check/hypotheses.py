"""The wrong semantics a failing answer matches: each a mistake people make, computed and compared.

When a function fails a case, its output is held against the oracle's answer to a *slightly
different question* -- the one a common bug answers instead: the scale ignored, the causal mask
shifted off the diagonal, upper-left and lower-right swapped, the mask ignored or inverted, key
heads repeated with ``repeat`` instead of ``repeat_interleave``, dropout's survivors not scaled,
the softmax taken over the queries, future scores set to 0 instead of -inf, the causal mask turned
round -- and the two a from-scratch version starts with together, no scale and no causal mask,
which name both keys. If the output agrees with one of them to within the case's own
limit (and that answer is really different from the right one), the row records the mistake's key
(:data:`KEYS`); :mod:`attnlab.lab.check.diagnose` turns the keys into sentences.

Two patterns need no second answer: NaN or infinity where the oracle is finite on a case with large
scores (a softmax without the max subtraction), and a difference only on the rows that see no key.
Rows that are wholly NaN are compared as zeros: a mask that leaves a row no key (the diagonal hidden)
gives NaN there through a plain softmax, where that mask's own answer is zeros -- that is the mask's
mistake, not an overflow.
"""

from __future__ import annotations

import math

import torch

from attnlab.lab.check import oracle, rule
from attnlab.lab.check.cases import Case

KEYS = ("scale-ignored", "unscaled", "scale-1/d", "causal-ignored", "mask-ignored", "mask-inverted",
        "mask-dropped-with-causal", "causal-dropped-with-mask", "diagonal", "lower-right-for-upper-left",
        "upper-left-for-lower-right", "gqa-repeat", "dropout-unscaled", "softmax-dim", "max-subtraction",
        "dead-rows", "mask-zero", "causal-reversed")


def matches(case: Case, x, mine, exp, comps) -> list[str]:
    """The keys of the wrong semantics the failing output ``mine[0]`` agrees with (see the module docstring)."""
    if mine is None or not isinstance(mine[0], torch.Tensor) or mine[0].shape != exp.ref[0].shape:
        return []
    out, ref = mine[0].detach().double().cpu(), exp.ref[0]
    limit = next((c.allowed for c in comps if c.quantity == "out"), 0.0)
    if not math.isfinite(limit) or (comps and comps[0].passed):
        return []  # the output is right: the fault is in the gradients
    found = []
    dead = _dead_rows(case, x, exp)
    if dead is not None and dead.any() and not dead.all():
        live = ~dead
        if rule.max_err(out[live], ref[live]) <= limit:
            found.append("dead-rows")
    # A wrong mask can leave a row no key (the diagonal hidden: query 0 sees nothing), and a plain softmax turns
    # such a row into NaN where the bug's own answer, PyTorch's, is zeros: rows wholly NaN are compared as zeros.
    finite = torch.isfinite(out)
    nan_rows = ~finite.all(dim=-1, keepdim=True)  # (..., L, 1)
    whole = bool((finite | nan_rows).all())  # every row all finite or all not
    held = out.masked_fill(nan_rows, 0.0) if whole else None
    explained = False  # the NaN rows are a wrong mask's rows with no key, not an overflow
    for key, alt in _alternatives(case, x, exp):
        if held is not None and rule.max_err(alt, ref) > 2 * limit and rule.max_err(held, alt) <= limit:
            found += [k for k in key.split("+") if k not in found]  # "a+b": two mistakes at once
            explained = explained or bool(nan_rows.any())
    if bool((~finite & torch.isfinite(ref)).any()) and case.magnitude > 1 and not explained:
        found.insert(0, "max-subtraction")
    return found


def _dead_rows(case: Case, x, exp) -> torch.Tensor | None:
    """(..., L, 1) True where a query sees no key (the oracle's weights sum to 0 there)."""
    f = exp.fwd  # the case's one oracle forward (judge.expect)
    dead = f.P.sum(dim=-1, keepdim=True) == 0  # (N, H, L, 1)
    return dead.reshape(*exp.ref[0].shape[:-1], 1).expand(exp.ref[0].shape)


def _alternatives(case: Case, x, exp):
    """(key, the output a bug of that kind gives): the oracle asked a slightly different question."""
    q, k, v = (t.detach().double().cpu() for t in (x.q, x.k, x.v))
    dense = oracle.cpu64(x.dense)
    L, S, E = case.L, case.S or case.L, case.E
    base = dict(attn_mask=dense, is_causal=case.is_causal, scale=case.scale, enable_gqa=case.gqa,
                keep=exp.keep, dropout_p=case.dropout_p)
    if case.mod is not None:
        return  # a modifier's own semantics are the question there

    def alt(**kw):
        return oracle.reference(q, k, v, **{**base, **kw})

    if case.scale is not None:
        yield "scale-ignored", alt(scale=None)
    yield "unscaled", alt(scale=1.0)
    yield "scale-1/d", alt(scale=1.0 / E)
    if case.is_causal:
        yield "causal-ignored", alt(is_causal=False)
        yield "unscaled+causal-ignored", alt(is_causal=False, scale=1.0)  # neither the scale nor the mask yet
        if dense is not None:
            yield "mask-dropped-with-causal", alt(attn_mask=None)
            yield "causal-dropped-with-mask", alt(is_causal=False)
        else:
            yield "diagonal", alt(is_causal=False, attn_mask=torch.ones(L, S, dtype=torch.bool).tril(-1))
            yield "causal-reversed", alt(is_causal=False, attn_mask=torch.ones(L, S, dtype=torch.bool).triu())
            if not case.gqa:  # a future key's score set to 0, not -inf: it still gets exp(0) of weight
                sc = 1.0 / math.sqrt(E) if case.scale is None else case.scale
                future = torch.ones(L, S, dtype=torch.bool).triu(1)
                yield "mask-zero", alt(is_causal=False, attn_mask=torch.where(future, -(q @ k.transpose(-2, -1)) * sc,
                                                                            0.0))
            if L != S:
                lower_right = torch.ones(L, S, dtype=torch.bool).tril(S - L)
                yield "lower-right-for-upper-left", alt(is_causal=False, attn_mask=lower_right)
    if dense is not None and not case.is_causal:
        yield "mask-ignored", alt(attn_mask=None)
        if dense.dtype == torch.bool:
            yield "mask-inverted", alt(attn_mask=~dense)
        if case.mask in ("lower-right", "causal_lower_right"):
            yield "upper-left-for-lower-right", alt(attn_mask=None, is_causal=True)
    if case.gqa:
        G = case.H // (case.Hkv or case.H)
        lead = [1] * (k.dim() - 3)  # key head h % Hkv for query head h: `repeat` where `repeat_interleave` is due
        yield "gqa-repeat", oracle.reference(q, k.repeat(*lead, G, 1, 1), v.repeat(*lead, G, 1, 1),
                                             **{**base, "enable_gqa": False})
    if case.dropout_p > 0 and exp.keep is not None:
        yield "dropout-unscaled", alt(dropout_p=0.0)
    if dense is None and not case.is_causal and not case.gqa and case.dropout_p == 0:
        sc = 1.0 / math.sqrt(E) if case.scale is None else case.scale
        yield "softmax-dim", torch.softmax(q @ k.transpose(-2, -1) * sc, dim=-2) @ v
