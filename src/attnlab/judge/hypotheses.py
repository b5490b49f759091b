"""The wrong semantics a failing answer matches: each a mistake people make, computed and compared.

When a function fails a case, its output is held against the oracle's answer to a *slightly
different question* -- the one a common bug answers instead: the scale ignored, the causal mask
shifted off the diagonal, upper-left and lower-right swapped, the mask ignored or inverted, key
heads repeated with ``repeat`` instead of ``repeat_interleave``, dropout's survivors not scaled,
the softmax taken over the queries, future scores set to 0 instead of -inf, the causal mask turned
round, the causal offset's sign flipped for S > L, the scores rounded to a half-precision input's
dtype before the softmax, dropout's survivors renormalised over the kept weights, zero keys padded
to a block's multiple and attended -- and the two a from-scratch version starts with together, no
scale and no causal mask, which name both keys. When the output is right and a gradient is not, the
gradients are held against those of attention under another mask (a backward that forgot it).
If the output agrees with one of them to within the case's own limit (and that answer is really
different from the right one), the row records the mistake's key; the causes
each key is said by are in :mod:`attnlab.judge.causes`.

Two patterns need no second answer: NaN or infinity where the oracle is finite on a case with large
scores (a softmax without the max subtraction), and a difference only on the rows that see no key.
Rows that are wholly NaN are compared as zeros: a mask that leaves a row no key (the diagonal hidden)
gives NaN there through a plain softmax, where that mask's own answer is zeros -- that is the mask's
mistake, not an overflow.
"""

from __future__ import annotations

import math

import torch

from attnlab.judge import oracle, rule
from attnlab.judge.cases import Case

BLOCKS = (16, 32, 64, 128)  # the tile widths a key length is padded to (pad-keys)


def matches(case: Case, x, mine, exp, comps) -> list[str]:
    """The keys of the wrong semantics the failing output ``mine[0]`` agrees with (see the module docstring)."""
    if mine is None or not isinstance(mine[0], torch.Tensor) or mine[0].shape != exp.ref[0].shape:
        return []
    out, ref = mine[0].detach().double().cpu(), exp.ref[0]
    limit = next((c.allowed for c in comps if c.quantity == "out"), 0.0)
    if not math.isfinite(limit):
        return []
    if comps and comps[0].passed:  # the output is right: the fault is in the gradients
        return _backward(case, x, mine, exp, comps)
    found = []
    dead = _dead_rows(case, x, exp)
    if dead is not None and dead.any() and not dead.all():
        live = ~dead
        if rule.max_err(out[live], ref[live]) <= limit:
            found += ["dead-rows", f"dead-rows={_dead_answer(out, dead, exp, limit)}"]
    # A wrong mask can leave a row no key (the diagonal hidden: query 0 sees nothing), and a plain softmax turns
    # such a row into NaN where the bug's own answer, PyTorch's, is zeros: rows wholly NaN are compared as zeros.
    finite = torch.isfinite(out)
    nan_rows = ~finite.all(dim=-1, keepdim=True)  # (..., L, 1)
    # every row all finite or all not, and some finite: an answer wholly NaN matches no semantics
    whole = bool((finite | nan_rows).all()) and not bool(nan_rows.all())
    held = out.masked_fill(nan_rows, 0.0) if whole else None
    explained = False  # the NaN rows are a wrong mask's rows with no key, not an overflow
    for key, alt in _alternatives(case, x, exp):
        if held is not None and rule.max_err(alt, ref) > 2 * limit and rule.max_err(held, alt) <= limit:
            found += [k for k in key.split("+") if k not in found]  # "a+b": two mistakes at once
            explained = explained or bool(nan_rows.any())
    if bool((~finite & torch.isfinite(ref)).any()) and case.magnitude > 1 and not explained:
        found.insert(0, "max-subtraction")
    return found


def _backward(case: Case, x, mine, exp, comps) -> list[str]:
    """["backward-mask"] when the failing gradients are those of attention under another mask (the forward right)."""
    if case.mod is not None or case.dropout_p > 0 or len(mine) < 4 or any(g is None for g in mine[1:4]):
        return []
    q, k, v = (t.detach().double().cpu() for t in (x.q, x.k, x.v))
    dense = oracle.cpu64(x.dense)
    others = ([dict(attn_mask=None, is_causal=False)] if dense is not None or case.is_causal else []) + (
        [dict(attn_mask=None), dict(is_causal=False)] if dense is not None and case.is_causal else [])
    for kw in others:
        alt = oracle.reference(q, k, v, **{**dict(attn_mask=dense, is_causal=case.is_causal, scale=case.scale,
                                                  enable_gqa=case.gqa), **kw}, grad_out=x.grad_out)
        pairs = [(c, g, a, r) for c, g, a, r in zip(comps[1:4], mine[1:4], alt[1:4], exp.ref[1:4], strict=False)]
        if all(rule.max_err(g, a) <= c.allowed for c, g, a, _ in pairs) and any(
                rule.max_err(a, r) > 2 * c.allowed for c, _, a, r in pairs):
            return ["backward-mask"]
    return []


def _with_causal(dense, keep: torch.Tensor):
    """A dense mask (or None) with the (L, S) bool ``keep`` applied too: the keys both allow."""
    if dense is None:
        return keep
    return dense & keep if dense.dtype == torch.bool else dense.masked_fill(~keep, -math.inf)


def _padded(case: Case, q, k, v, dense, keep, pad: int):
    """Attention with ``pad`` zero keys and values appended, and seen (a tile loop that never masks them)."""
    L, S = case.L, case.S or case.L
    m = _with_causal(dense, torch.ones(L, S, dtype=torch.bool).tril()) if case.is_causal else dense
    if m is not None:
        m = torch.nn.functional.pad(m, (0, pad), value=True if m.dtype == torch.bool else 0.0)
    kp, vp = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (k, v))
    kept = None if keep is None else torch.nn.functional.pad(keep, (0, pad), value=True)
    return oracle.reference(q, kp, vp, attn_mask=m, scale=case.scale, enable_gqa=case.gqa, keep=kept,
                            dropout_p=case.dropout_p)


def _renormalised(case: Case, q, k, v, dense, keep) -> torch.Tensor:
    """Dropout whose kept weights are divided by their sum, not by 1 - p."""
    f = oracle.forward(q, k, v, dense, case.is_causal, case.scale, case.gqa)
    kept = f.P * keep.to(torch.float64).reshape(f.P.shape)
    total = kept.sum(dim=-1, keepdim=True)
    return oracle.unflatten((kept / torch.where(total == 0, 1.0, total)) @ f.v, f)


def _dead_rows(case: Case, x, exp) -> torch.Tensor | None:
    """(..., L, 1) True where a query sees no key (the oracle's weights sum to 0 there)."""
    f = exp.fwd  # the case's one oracle forward (judge.expect)
    dead = f.P.sum(dim=-1, keepdim=True) == 0  # (N, H, L, 1)
    return dead.reshape(*exp.ref[0].shape[:-1], 1).expand(exp.ref[0].shape)


def _dead_answer(out: torch.Tensor, dead: torch.Tensor, exp, limit: float) -> str:
    """What a function returns in the rows that see no key: "nan", "mean" (the mean of V: every key weighted alike,
    as a large finite number in place of -inf gives) or "other" (PyTorch's answer there is zeros)."""
    got = out[dead]
    if not bool(torch.isfinite(got).any()):
        return "nan"
    f = exp.fwd
    mean = oracle.unflatten(f.v.mean(dim=-2, keepdim=True).expand(*f.v.shape[:-2], f.P.shape[-2], f.v.shape[-1]), f)
    if bool(torch.isfinite(got).all()) and rule.max_err(got, mean[dead]) <= max(limit, 1e-3 * float(mean.abs().max())):
        return "mean"
    return "other"


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
        ones = torch.ones(L, S, dtype=torch.bool)
        yield "diagonal", alt(is_causal=False, attn_mask=_with_causal(dense, ones.tril(-1)))
        yield "causal-reversed", alt(is_causal=False, attn_mask=_with_causal(dense, ones.triu()))
        if not case.gqa:  # a future key's score set to 0, not -inf: it still gets exp(0) of weight
            sc = 1.0 / math.sqrt(E) if case.scale is None else case.scale
            zero = torch.where(ones.triu(1), -(q @ k.transpose(-2, -1)) * sc, 0.0)
            if dense is not None:  # the mask still applies after
                zero = zero.masked_fill(~dense, -math.inf) if dense.dtype == torch.bool else zero + dense
            yield "mask-zero", alt(is_causal=False, attn_mask=zero)
        if L != S:
            yield "lower-right-for-upper-left", alt(is_causal=False, attn_mask=_with_causal(dense, ones.tril(S - L)))
        if S > L:  # an offset meant to be S - L, taken as L - S
            flipped = _with_causal(dense, torch.ones(L, S, dtype=torch.bool).tril(L - S))
            yield "causal-offset-sign", alt(is_causal=False, attn_mask=flipped)
    if dense is not None and dense.dtype == torch.bool:
        yield "mask-inverted", alt(attn_mask=~dense)
    if dense is not None and not case.is_causal:
        yield "mask-ignored", alt(attn_mask=None)
        if case.mask in ("lower-right", "causal_lower_right"):
            yield "upper-left-for-lower-right", alt(attn_mask=None, is_causal=True)
    if case.gqa:
        G = case.H // (case.Hkv or case.H)
        lead = [1] * (k.dim() - 3)  # key head h % Hkv for query head h: `repeat` where `repeat_interleave` is due
        yield "gqa-repeat", oracle.reference(q, k.repeat(*lead, G, 1, 1), v.repeat(*lead, G, 1, 1),
                                             **{**base, "enable_gqa": False})
    if case.dropout_p > 0 and exp.keep is not None:
        yield "dropout-unscaled", alt(dropout_p=0.0)
        yield "dropout-renormalised", _renormalised(case, q, k, v, dense, exp.keep)
    if x.q.dtype in (torch.float16, torch.bfloat16):  # the scaled scores stored in the inputs' dtype
        dt = x.q.dtype
        yield "scores-rounded", alt(score_mod=lambda s, b, h, i, j: s.to(dt).double())
    if case.dropout_p == 0 or exp.keep is not None:
        for pad in dict.fromkeys((-S) % b for b in BLOCKS if S % b):
            yield "pad-keys", _padded(case, q, k, v, dense, exp.keep, pad)
    if dense is None and not case.is_causal and not case.gqa and case.dropout_p == 0:
        sc = 1.0 / math.sqrt(E) if case.scale is None else case.scale
        yield "softmax-dim", torch.softmax(q @ k.transpose(-2, -1) * sc, dim=-2) @ v
