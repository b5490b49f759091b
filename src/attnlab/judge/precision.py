"""Precision causes, named by the size of the error: a failure that is a rounding, and which one.

A kernel that keeps its scores in bfloat16, or folds the scale into q in the input dtype, or lets a float32
constant into a float64 path, is right in its formula and wrong in its numbers. Its output cannot equal any
one rounding order the judge might try (a kernel rounds where it rounds: after the matmul, after the scale,
in the running max), but the *size* of its error is the cause's: scores rounded to bfloat16 move each score by
about 2^-9 of itself, and the output by what that does through the softmax -- far more than a correct kernel's
error on large scores, about as much on small ones.

So each cause has an error model: the case's own inputs pushed through the oracle's formula with the cause's
roundings, in two or three orders (:func:`_models`), each giving an error max|answer - oracle| that would fail
the rule and is clear of the correct computation's (PyTorch's on the same case, times :data:`CLEAR`). A failing
output whose error is within a factor :data:`BAND` of one of them is that cause; where several hold it, the one
nearest in ratio. The emulations round with
``torch.Tensor.to(dtype)`` and compute the rest in float64, on the oracle's scores (its forward's weights and
log-sum-exp give them back, after the score modifier and the mask), so they share nothing with the forms.
"""

from __future__ import annotations

import functools
import math

import torch

from attnlab.judge import hint as H
from attnlab.judge import oracle, rule

CAUSES = ("scores-rounded", "scale-folded", "softmax-half", "exp-half", "kv-half", "bias-half", "pv-half", "lse-half",
          "merge-half", "float32-in-float64", "eps-in-sum",
          "bwd-half")  # the keys it names (bwd-half: backward_precision)
BAND = 2.0  # an error within this factor of one of a cause's orders fits the cause
WIDE = 10.0  # ... in float64, where nothing correct comes near float32's error, and float32 rounds in many places
SHAPE = 0.5  # a cast to half precision in a full-precision case: the output that near the cast's answer, on average
CLEAR = 2.0  # an order counts where its error is this many times the correct computation's
SAME = 0.8  # an order whose error has at least this cosine with the function's is the function's rounding
TIED = 0.05  # ... and orders this close to the best cosine tie with it
HALF = (torch.float16, torch.bfloat16)
GUARD = 1e-3  # the largest constant read as a guard added to the softmax's sum
STEPS = 256  # at most this many steps in the emulation of a sum run key by key
BLOCK = 64  # the key block a running sum is accumulated over, in the emulation of a half-precision sum


def rounding(hint: str) -> bool:
    """A hint that names a rounding (one of :data:`CAUSES`, or a tie of them; not one that only supports)."""
    return not H.supporting(hint) and all(k in CAUSES for k in H.readings(hint))


def cause(case_dtype: torch.dtype, f: oracle.Forward, mine: torch.Tensor, ref: torch.Tensor, theirs: torch.Tensor,
          limit: float, lse_passed: float | None = None) -> str | None:
    """The precision causes whose error models hold ``mine``'s error, nearest first, as a hint (a tie where there are
    several: the diagnosis keeps the one the function's other cases show), or None.
    ``f`` the oracle's forward for the case (:attr:`attnlab.judge.judge.Expected.fwd`), ``theirs`` PyTorch's
    output in the case's dtype. ``lse_passed``: the limit of an API's log-sum-exp that passed -- a cause whose
    every order would have failed it is not the function's (a rounding of the scores moves the lse too). With sinks,
    each model rounds the problem a sink is (:func:`attnlab.judge.oracle.as_key`): the sink one more score."""
    f = oracle.as_key(f)
    found = _cause(case_dtype, f, mine, ref, theirs, limit)
    if found is None or lse_passed is None:
        return found
    kept = [k for k in H.readings(found) if not _predicts(k, _lse_models(case_dtype), f, case_dtype, lse_passed,
                                                         lambda a: float((a - f.lse)[torch.isfinite(f.lse)].abs()
                                                                         .max()) if torch.isfinite(f.lse).any() else 0)]
    return H.tie(kept) or None


def _predicts(key: str, models: dict, f, dtype, limit: float, err) -> bool:
    """Every order of ``key``'s model in ``models`` errs past ``limit`` by ``err`` (False where it has none): the
    cause would fail a quantity the function passed."""
    orders = models.get(key, ())
    return bool(orders) and all(err(order(f, dtype)) > MARGIN * limit for order in orders)


MARGIN = 2.0  # a model predicts a quantity's failure where its error is this many times that quantity's limit


def _cause(case_dtype, f, mine, ref, theirs, limit) -> str | None:
    mine = mine.detach().double().cpu()
    err = rule.max_err(mine, ref)
    if not (math.isfinite(err) and err > limit) or not bool(torch.isfinite(mine).all()):
        return None
    if eps_in_sum(f, mine, ref, limit) is not None:
        return "eps-in-sum"
    floor = max(limit, CLEAR * rule.max_err(theirs, ref))
    models, pointing = {}, []
    for key, orders in _models(case_dtype).items():
        answers = [oracle.unflatten(order(f, case_dtype), f) for order in orders]
        if case_dtype not in HALF and key != "float32-in-float64":  # a cast a full-precision case does not make:
            answers = [a for a in answers if rule.mean_err(mine, a) <= SHAPE * rule.mean_err(a, ref)]  # the answer too
        models[key] = [rule.max_err(a, ref) for a in answers]
        pointing += [(cosine(mine - ref, a - ref), key, e) for a, e in zip(answers, models[key], strict=True)]
    # by direction; by size alone only in a float64 call, where nothing but float32 somewhere errs so (in a half
    # dtype every cause errs by one rounding's size: there the size names none of them, and the line is "not placed")
    return _pointing(case_dtype, err, floor, pointing) or (
        _fitting(case_dtype, err, floor, models) if case_dtype == torch.float64 else None)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """How alike two errors are in direction, over every element (0 where either is none)."""
    a, b = a.flatten(), b.flatten()
    n = float(a.norm() * b.norm())
    return float(a @ b) / n if n > 0 and math.isfinite(n) else 0.0


def _pointing(case_dtype: torch.dtype, err: float, floor: float, pointing: list) -> str | None:
    """The causes of the orders whose error points where the function's does (cosine at least :data:`SAME`), and
    is of its size: a rounding made where the function makes it moves each number as the function's did -- which
    the size alone cannot tell (scores rounded once and the scale folded into q err alike in size, not in where)."""
    band = WIDE if case_dtype == torch.float64 else BAND
    same = [(c, key) for c, key, e in pointing if c >= SAME and e > floor and e / band <= err <= e * band]
    if not same:
        return None
    top = max(c for c, _ in same)
    return H.tie(dict.fromkeys(key for c, key in sorted(same, reverse=True) if c >= top - TIED))


def eps_in_sum(f: oracle.Forward, mine: torch.Tensor, ref: torch.Tensor, limit: float) -> float | None:
    """The constant a softmax's sum was given (out = sum p v / (l + eps), a guard against an empty row), where one
    eps makes ``mine`` the right answer scaled by l / (l + eps) in every row that sees a key, to within ``limit`` --
    a row rescaled by its own sum, which no rounding does; None where no eps does. l is the sum of exp(s - max)
    (a kernel that subtracts the row max), or of exp(s)."""
    f = oracle.as_key(f)
    live = torch.isfinite(f.lse)  # (N, H, L)
    if not live.any():
        return None
    s = _scores(f)
    m = s.amax(dim=-1)
    for l in (torch.exp(f.lse - torch.where(live, m, 0.0)), torch.exp(f.lse)):
        l = oracle.unflatten(torch.where(live, l, 1.0)[..., None], f)  # (..., L, 1)
        rows = oracle.unflatten(live[..., None], f)[..., 0] & (ref.abs().amax(dim=-1) > 0)
        if not torch.isfinite(l[rows]).all():
            continue
        d = -ref / l  # the first-order change of each row per unit eps
        per_row = ((mine - ref) * d).sum(dim=-1)[rows] / (d * d).sum(dim=-1)[rows]
        eps = float(per_row.median()) if per_row.numel() else 0.0
        if not 0 < eps <= GUARD:  # (zero keys attended add their count to the sum of exp(s): pad-keys, not a guard)
            continue
        model = torch.where(rows[..., None], ref * (l / (l + eps)), ref)
        if rule.max_err(model, ref) > limit and rule.max_err(mine, model) <= limit:
            return eps
    return None


def lse_cause(case_dtype: torch.dtype, f: oracle.Forward, mine, limit: float, out_limit: float | None = None,
              steps: tuple[int, ...] = ()) -> str | None:
    """:func:`cause` for a log-sum-exp that fails where the output passes: its error on the rows that see a key
    against the log-sum-exp of each cause's rounded scores (scores kept in bfloat16 make the lse wrong as much as
    they make the output; a kernel's output may stay within its rule where its float32 lse cannot). ``out_limit``:
    the output's limit, which it passed -- a cause whose every order would have failed the output is not the
    function's (an lse stored in bfloat16 leaves the output alone; scores rounded there do not). ``steps``: the key
    tiles the function is known to run (a lab level's), for a running sum's model."""
    f = oracle.as_key(f)
    live = torch.isfinite(f.lse)
    if not isinstance(mine, torch.Tensor) or mine.shape != f.lse.shape or not live.any():
        return None
    err = float((mine.detach().double().cpu() - f.lse)[live].abs().max())
    if not (math.isfinite(err) and err > limit):
        return None
    told = live & _off_the_max(f)  # (where the lse is its row's max score, a half dtype's scores give its bits too)
    held = _stored_half(mine.detach().cpu()[told], case_dtype) if int(told.sum()) >= 2 else None
    if held is not None and err <= ROUNDINGS * torch.finfo(held).eps * float(f.lse[live].abs().max()):
        # every value a half dtype's (or in a float64 call, float32's), and off by a few of its roundings: it was
        # stored there
        return "float32-in-float64" if held == torch.float32 else "lse-half"
    gone = (mine.detach().double().cpu() - f.lse)[live]
    answers = {key: [(order(f, case_dtype) - f.lse)[live] for order in orders]
               for key, orders in _lse_models(case_dtype, steps).items()
               if not (key == "lse-half" and held is None and int(told.sum()) >= 2)}
    # (an lse rounded to a half dtype as a whole has that dtype's values, which these are not: its bits refute it)
    if out_limit is not None:
        ref = oracle.unflatten(f.Pd @ f.v, f)
        answers = {key: errs for key, errs in answers.items() if not _predicts(
            key, _forwards_of_lse(case_dtype), f, case_dtype, out_limit,
            lambda a: rule.max_err(oracle.unflatten(a, f), ref))}
    # named only where a model's error points where the function's does: a rounding of the lse's size made
    # elsewhere (the scores', the sum's) errs as much, in other rows
    return _pointing(case_dtype, err, limit, [(cosine(gone, e), key, float(e.abs().max()))
                                              for key, errs in answers.items() for e in errs])


def _forwards_of_lse(dtype: torch.dtype) -> dict:
    """The outputs of each cause an lse model stands for: :func:`_models`' own, and for softmax-half also the sum
    alone kept in the dtype, the weights divided by it in full precision (whose lse :func:`_lse_sum_rounded` is): a
    sum kept in bfloat16 moves the output by one rounding, which the output's rule can pass."""
    models = _models(dtype)
    if "softmax-half" in models:
        models = {**models, "softmax-half": (*models["softmax-half"], _sum_rounded)}
    return models


ROUNDINGS = 4  # an lse held in a half dtype is off by at most this many of its relative roundings (eps) of |lse|


def _off_the_max(f: oracle.Forward) -> torch.Tensor:
    """The rows whose log-sum-exp stands off their largest score by more than a few of bfloat16's roundings of it:
    there an lse whose every value is a half dtype's was stored there. Where one key outweighs the rest (large
    logits), the lse *is* the max score, and scores computed in a half dtype make it one of that dtype's values too.
    Nor the rows whose max score is 0 (a probe's q = 0): there the lse is log(l) alone, and a log taken of a sum kept
    in a half dtype is that dtype's value as much as an lse stored there."""
    top = _scores(f).amax(dim=-1)
    gap = f.lse - top
    return (torch.nan_to_num(gap, nan=0.0) > ROUNDINGS * torch.finfo(torch.bfloat16).eps * f.lse.abs()) & (top != 0)


def _stored_half(x: torch.Tensor, case_dtype: torch.dtype | None = None) -> torch.dtype | None:
    """The half dtype every value of a tensor is a value of (some not integers, which every dtype holds), float16's
    before bfloat16's -- or in a float64 call (``case_dtype``), float32: the tensor passed through that dtype on its
    way -- a fact of its bits, not of its error's size. None where there is none."""
    x = x[torch.isfinite(x)].double()
    if x.numel() < 2 or bool((x == x.round()).all()):
        return None
    narrower = (*HALF, torch.float32) if case_dtype == torch.float64 else HALF
    return next((h for h in narrower if bool((x.to(h).double() == x).all())), None)


def _fitting(case_dtype: torch.dtype, err: float, floor: float, models: dict) -> str | None:
    """The keys of ``models`` ({key: [its orders' errors]}) with an order clear of ``floor`` and within the band
    of ``err``, nearest in ratio first, as a hint (a tie where there are several)."""
    band = WIDE if case_dtype == torch.float64 else BAND
    fits = sorted((abs(math.log(err / e)), key) for key, errs in models.items() for e in errs
                  if e > floor and e / band <= err <= e * band)
    keys = list(dict.fromkeys(key for _, key in fits))
    return H.tie(keys) or None


def noise(dtype: torch.dtype, f: oracle.Forward, ref: torch.Tensor) -> float:
    """The largest error a precision cause gives on this case (half precision's roundings; in float64, float32's:
    0 in float32): how far a function with such a cause may sit from an answer and still be that answer, for the
    semantic causes looked for first (a window off by one computed in float32 in a float64 run)."""
    if dtype not in (*HALF, torch.float64):
        return 0.0
    f = oracle.as_key(f)
    models = _models(dtype) if dtype in HALF else {"float32-in-float64": _models(dtype)["float32-in-float64"]}
    return (1.0 if dtype in HALF else WIDE) * max(rule.max_err(oracle.unflatten(order(f, dtype), f), ref)
                                                  for orders in models.values() for order in orders)


def _models(dtype: torch.dtype) -> dict:
    if dtype in HALF:
        return {"scores-rounded": (_scores_once, _scores_twice, _scores_unscaled, _sum_rounded, _sum_running),
                "scale-folded": (_fold_q, _fold_k, _fold_both,
                                 *(functools.partial(_folded, on_q=side, factor=LOG2E) for side in (True, False))),
                "softmax-half": (_softmax_half, _softmax_half_blocks),
                "exp-half": (_exp_half, _exp_half_result)}
        # (no merge in the inputs' half dtype: there a split's lse rounded errs as a running sum kept there does, and
        # the size names neither -- a merge in half is read where the inputs are float32 or float64)
    # cast down to a half dtype (a fixed one, whatever the inputs')
    half = {"softmax-half": tuple(functools.partial(order, half=h) for h in HALF
                                  for order in (_softmax_cast, _softmax_half, _softmax_half_blocks, _sum_cast)),
            "scores-rounded": tuple(functools.partial(_scores_cast, half=h) for h in HALF)
            + tuple(functools.partial(_qk_cast, half=h, product=p) for h in HALF for p in (True, False)),
            "exp-half": tuple(functools.partial(_exp_cast, half=h, argument=a) for h in HALF for a in (True, False))
            + tuple(functools.partial(_exp_cast, half=h, argument=False, summed=False) for h in HALF),
            "kv-half": tuple(functools.partial(_inputs_cast, half=h, which=w) for h in HALF
                             for w in ("kv", "k", "v", "qkv")),
            "bias-half": tuple(functools.partial(_bias_cast, half=h, slope=sl) for h in HALF for sl in (False, True)),
            # P V's result rounded to a half dtype: its operands cast down for the product, or the running output
            # kept there between key blocks -- the same roundings of the same sums, which the error cannot tell apart
            "pv-half": tuple(functools.partial(_pv_cast, half=h, normalised=n, product=p) for h in HALF
                             for n in (True, False) for p in (True, False))
            + tuple(functools.partial(_acc_cast, half=h) for h in HALF),
            "merge-half": tuple(order for h in HALF for order in _merges(h))}
    if dtype == torch.float64:  # (a bias in float32 there is float32 in a float64 call, as the corpus says it)
        return {"float32-in-float64": (_scale32, _all32, _values32, functools.partial(_bias_cast, half=torch.float32)),
                **half}
    return half


def _lse_models(dtype: torch.dtype, steps: tuple[int, ...] = ()) -> dict:
    """The log-sum-exp each cause gives, (N, H, L) float64: of its rounded scores (or with its rounded sum; a
    running sum stored after each tile of :data:`TILES` keys, or of ``steps``, a caller's own tiles)."""
    steps = tuple(dict.fromkeys((*TILES, *steps)))
    def of(change):
        return lambda f, dt: _lse(change(f, dt))

    if dtype in HALF:
        return {"scores-rounded": (of(lambda f, dt: _r(_scores(f), dt)),
                                   of(lambda f, dt: _r(_r(_scores(f) / f.scale, dt) * f.scale, dt)),
                                   of(lambda f, dt: _r(_scores(f) / f.scale, dt) * f.scale)),
                "scale-folded": tuple(of(lambda f, dt, side=side, c=c: _scores(f) + _fold_error(f, dt, side, c))
                                      for side in (True, False, None) for c in (1.0, LOG2E)),
                "softmax-half": (_lse_sum_rounded, functools.partial(_lse_sum_rounded, log=True),
                                 functools.partial(_lse_sum_rounded, log=True, each=True),
                                 *(functools.partial(_lse_sum_running, step=n, log=log, twice=twice)
                                   for n in steps for log in (False, True) for twice in (False, True))),
                "exp-half": (lambda f, dt: _lse_of_p(f, _exp_rounded(f, dt, True)),
                             lambda f, dt: _lse_of_p(f, _exp_rounded(f, dt, False))),
                "lse-half": (lambda f, dt: _r(f.lse, dt),)}
    merged = {"merge-half": tuple(order for h in HALF for order in _merges(h, lse=True))}
    if dtype == torch.float64:
        return {"float32-in-float64": (of(lambda f, dt: _scores(f) * (float(torch.tensor(f.scale, dtype=torch.float32))
                                                                      / f.scale)),
                                       of(lambda f, dt: _scores(f).float().double())), **merged}
    return merged  # (a full-precision lse stored in a half dtype as a whole is read from its bits: lse_cause)


def _exp_rounded(f, dtype, argument: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, m): exp(s - m) taken in the dtype -- its result rounded, and with ``argument`` its argument too -- and the
    row max m it was shifted by (0 where a row sees no key)."""
    s = _scores(f)
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, 0.0)
    x = s - m
    return _r((_r(x, dtype) if argument else x).exp(), dtype), m


def _lse_of_p(f, pm) -> torch.Tensor:
    p, m = pm
    total = p.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, m + total.clamp_min(1e-300).log(), -math.inf)[..., 0]


def _exp_half(f, dtype):
    p, _ = _exp_rounded(f, dtype, True)  # exp of a rounded argument, its result rounded, the sum in float32
    total = p.sum(dim=-1, keepdim=True)
    return _finish(_scores(f), f, dtype, p / torch.where(total == 0, 1.0, total))


def _exp_cast(f, dtype, half, argument: bool, summed: bool = True):
    """exp in a half dtype a full-precision case is cast to; ``summed``: its sum taken of the rounded weights, else
    of the unrounded ones (a kernel that rounds p only for its product with V, as Triton's tutorial does)."""
    p, m = _exp_rounded(f, half, argument)
    total = (p if summed else (_scores(f) - m).exp()).sum(dim=-1, keepdim=True)
    return _finish(_scores(f), f, dtype, p / torch.where(total == 0, 1.0, total))


def _scores_cast(f, dtype, half):
    return _finish(_r(_scores(f), half), f, dtype)  # the scores stored in a half dtype, the rest in the case's


def _pv_cast(f, dtype, half, normalised: bool, product: bool):
    """P V taken in a half dtype whatever the case's: the weights (``normalised``, or exp(s - max) before the
    division by their sum, as an online softmax holds them) and the values cast down, their product rounded there
    too with ``product`` (else taken upcast), the output stored back in the case's dtype."""
    store = dtype if dtype in HALF else torch.float64

    def pv(p):
        out = p @ _r(f.v, half)
        return _r(out, half) if product else out

    if normalised:
        return _r(pv(_r(f.P, half)), store)
    p, m = _exp_rounded(f, half, False)
    total = (_scores(f) - m).exp().sum(dim=-1, keepdim=True)
    return _r(pv(p) / torch.where(total == 0, 1.0, total), store)


def _acc_cast(f, dtype, half):
    """The running output kept in a half dtype between blocks of :data:`BLOCK` keys (exp(s - max) against the row's
    max, the sum in full precision), divided by the sum at the end."""
    p, m = _exp_rounded(f, torch.float64, False)
    acc = torch.zeros_like(f.out)
    for j in range(0, p.shape[-1], BLOCK):
        acc = _r(acc + p[..., j:j + BLOCK] @ f.v[..., j:j + BLOCK, :], half)
    total = p.sum(dim=-1, keepdim=True)
    return _r(acc / torch.where(total == 0, 1.0, total), dtype if dtype in HALF else torch.float64)


def _qk_cast(f, dtype, half, product: bool):
    return _inputs_cast(f, dtype, half, "qk", product)  # q and k cast down before their matmul (taken there)


def _inputs_cast(f, dtype, half, which: str, product: bool = False):
    """The inputs named in ``which`` ("q", "k", "v") cast to a half dtype before the matmuls, whatever the case's
    dtype (a kernel's ``.half()`` on its operands, a cache or a tile staged in half); with ``product``, Q Kᵀ rounded
    there too (a matmul in that dtype, not one upcast first). The scores' change is added to the oracle's own (its
    modifier and mask kept), as a difference of products."""
    s = _scores(f)
    if "q" in which or "k" in which:
        q, k = (_r(t, half) if name in which else t for name, t in (("q", f.q), ("k", f.k)))
        qk = q @ k.transpose(-2, -1)
        qk = _r(qk, half) if product else qk
        s = s + (qk - f.q @ f.k.transpose(-2, -1)) * f.scale
    return _finish(s, f, dtype, v=_r(f.v, half) if "v" in which else None)


def _bias_cast(f, dtype, half, slope: bool = False):
    """What the modifier and the mask add to the scaled q·kᵀ (ALiBi's bias, a float mask; with a soft-cap, its
    change too) rounded to ``half`` before it is added, whatever the case's dtype; the rest in the case's.
    ``slope``: a bias that is a slope times a whole distance (ALiBi) built from the slope rounded to ``half`` too --
    each head's slope read from the bias itself (the step between neighbouring keys)."""
    s = _scores(f)
    raw = (f.q @ f.k.transpose(-2, -1)) * f.scale
    live = torch.isfinite(s)
    bias = torch.where(live, s - raw, 0.0)
    if slope:
        step = (bias[..., 1:] - bias[..., :-1]).abs()
        step = torch.where(live[..., 1:] & live[..., :-1], step, math.nan).flatten(-2).nanmedian(dim=-1).values
        whole = bias / torch.where(step > 0, step, math.nan).nan_to_num(nan=1.0)[..., None, None]
        if bool(((whole - whole.round()).abs() > 1e-6)[live].any()):  # not a slope times a whole distance: the
            return _finish(torch.where(live, raw + _r(bias, half), s), f, dtype)  # bias rounded once, as it is
        ratio = torch.where(step > 0, _r(step, half) / step, 1.0).nan_to_num(nan=1.0)  # (N, H)
        bias = bias * ratio[..., None, None]
    return _finish(torch.where(live, raw + _r(bias, half), s), f, dtype)


def _exp_half_result(f, dtype):
    p, _ = _exp_rounded(f, dtype, False)
    total = p.sum(dim=-1, keepdim=True)
    return _finish(_scores(f), f, dtype, p / torch.where(total == 0, 1.0, total))


def _lse(s: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(s, dim=-1)


def _lse_sum_rounded(f, dtype, log: bool = False, each: bool = False):
    """The max right, the sum of exp(s - max) kept in the dtype (``each``: of the weights rounded there first), and
    with ``log`` its log taken there too (torch's log of a bfloat16 sum is bfloat16), the max added in float32."""
    s = _scores(f)
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, 0.0)
    p = (s - m).exp()
    total = _r((_r(p, dtype) if each else p).sum(dim=-1, keepdim=True), dtype)
    logged = _r(total.log(), dtype) if log else total.log()
    return (m + logged)[..., 0]


TILES = (16, 32, 64, 128)  # the widths of the key tiles an online softmax's running sum may be stored after


def _lse_sum_running(f, dtype, step: int, log: bool = False, twice: bool = False):
    """An online softmax's lse with its running sum stored in the dtype after each tile of ``step`` keys (rescaled
    to each tile's running max, as a tiled kernel keeps it; ``twice``: stored after the rescale too, as in-place
    ``l.mul_(alpha).add_(...)`` on a half tensor does), the max in full precision, the log there too or (``log``)
    taken in the dtype, as torch's log of a half tensor is."""
    s = _scores(f)
    m = torch.full_like(s[..., :1], -math.inf)
    total = torch.zeros_like(m)
    for j in range(0, s.shape[-1], step):
        t = s[..., j:j + step]
        new = torch.maximum(m, t.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isfinite(new), new, 0.0)
        alpha = torch.where(torch.isfinite(m), (m - safe).exp(), 0.0)
        kept = _r(total * alpha, dtype) if twice else total * alpha
        total = _r(kept + (t - safe).exp().sum(dim=-1, keepdim=True), dtype)
        m = new
    logged = total.clamp_min(1e-300).log()
    logged = _r(logged, dtype) if log else logged
    return torch.where(total > 0, torch.where(torch.isfinite(m), m, 0.0) + logged, -math.inf)[..., 0]


SPLITS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)  # the widths of the key splits a split-KV kernel merges (pages, chunks)


def _merges(half: torch.dtype, lse: bool = False) -> tuple:
    """The orders of a split-KV merge done in ``half`` (each split of :data:`SPLITS` keys its own softmax, merged by
    the splits' lse): the splits' lse stored there, or the merge weights exp(lse_j - max) taken there (:func:`_merged`)
    -- with ``lse``, the log-sum-exp each gives. Weights of splits of one key are exp of each score taken in half:
    exp-half's own model, not a merge's, and left to it."""
    return tuple(functools.partial(_merged, half=half, width=w, weights=kind, lse=lse) for w in SPLITS
                 for kind in (None, "result", "argument") if w > 1 or kind is None)


def _merged(f, dtype, half, width: int, weights: str | None, lse: bool = False):
    """Each split of ``width`` keys normalised by its own lse_j in full precision, then merged: out = sum_j w_j o_j
    / sum_j w_j, w_j = exp(lse_j - max_j lse_j), with the lse_j (or, ``weights``, the w_j: the "result" of exp, or
    its "argument" too, and their sum and its log) rounded to ``half`` first; lse = max_j lse_j + log sum_j w_j. The
    merge is one set of weights, P'_ik = w_j(k) exp(s_ik - lse_j(k)) / sum w, so no split's output is held apart."""
    s = _scores(f)
    S = s.shape[-1]
    pad = -S % width
    tiles = torch.nn.functional.pad(s, (0, pad), value=-math.inf).unflatten(-1, (-1, width))
    exact = torch.logsumexp(tiles, dim=-1)  # (N, H, L, n): -inf for a split that sees no key
    part = torch.where(torch.isfinite(exact), _r(exact, half), exact) if not weights else exact
    top = part.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, 0.0)
    w = torch.where(torch.isfinite(part), (part - top).exp(), 0.0)
    if weights:  # exp(lse_j - max_j lse_j) taken in the half dtype (its result, or its argument too), summed there
        w = _r((_r(part - top, half) if weights == "argument" else part - top).exp(), half)
    total = w.sum(dim=-1, keepdim=True)
    total = _r(total, half) if weights else total  # (a half tensor's sum is half, and so is its log)
    if lse:
        log = total.clamp_min(1e-300).log()
        return torch.where(total > 0, top + (_r(log, half) if weights else log), -math.inf)[..., 0]
    w = w / torch.where(total > 0, total, 1.0)
    inner = torch.where(torch.isfinite(tiles),
                        (tiles - torch.where(torch.isfinite(exact), exact, 0.0)[..., None]).exp(), 0.0)
    P = (inner * w[..., None]).flatten(-2)[..., :S]
    return _finish(s, f, dtype, P)


def _r(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype).double()


def _scores(f: oracle.Forward) -> torch.Tensor:
    """The oracle's scores after the modifier and the mask, (N, H, L, S): log P + lse (-inf where masked)."""
    lse = torch.where(torch.isfinite(f.lse), f.lse, 0.0)[..., None]
    return torch.where(f.P > 0, f.P.log() + lse, -math.inf)


def _finish(s: torch.Tensor, f: oracle.Forward, dtype: torch.dtype, P: torch.Tensor | None = None,
            v: torch.Tensor | None = None) -> torch.Tensor:
    """A correct kernel's rest from scores ``s``: softmax with float32-or-better statistics, P rounded to the
    dtype before P V (with ``v``, the values a model changed), the output stored in the dtype."""
    if P is None:
        dead = torch.isneginf(s).all(dim=-1, keepdim=True)
        P = torch.softmax(torch.where(dead, 0.0, s), dim=-1).masked_fill(dead, 0.0)
    store = dtype if dtype in HALF else torch.float64
    return _r(_r(P, store) @ (f.v if v is None else v), store)


def _scores_once(f, dtype):
    return _finish(_r(_scores(f), dtype), f, dtype)  # the scaled scores stored in the dtype


def _scores_twice(f, dtype):
    s = _scores(f)  # q k^T rounded, then scaled in the dtype and rounded again
    return _finish(_r(_r(s / f.scale, dtype) * f.scale, dtype), f, dtype)


def _scores_unscaled(f, dtype):
    s = _scores(f)  # q k^T rounded (a matmul in the dtype), the scale applied after in float32 or better
    return _finish(_r(s / f.scale, dtype) * f.scale, f, dtype)


def _sum_rounded(f, dtype):
    s = _scores(f)  # the scores right, the running sum kept in the dtype
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, 0.0)
    p = (s - m).exp()
    total = _r(p.sum(dim=-1, keepdim=True), dtype)
    return _finish(s, f, dtype, p / torch.where(total == 0, 1.0, total))


def _sum_running(f, dtype, half=None, step: int | None = None):
    """The sum of exp(s - max) run over the keys in steps of ``step`` (by default key by key, a few hundred steps at
    most), each step stored in ``half`` (by default the case's dtype); the weights and the rest in the case's."""
    s = _scores(f)
    m = s.amax(dim=-1, keepdim=True)
    p = (s - torch.where(torch.isfinite(m), m, 0.0)).exp()
    step = step or max(1, p.shape[-1] // STEPS)
    total = torch.zeros_like(p[..., :1])
    for j in range(0, p.shape[-1], step):
        total = _r(total + p[..., j:j + step].sum(dim=-1, keepdim=True), half or dtype)
    return _finish(s, f, dtype, p / torch.where(total == 0, 1.0, total))


def _fold_error(f, dtype, on_q: bool | None, factor: float = 1.0) -> torch.Tensor:
    """What the scale multiplied into q (or k; None: its square root into each) and stored in the dtype before the
    matmul adds to the scores; ``factor``: folded in with the scale (log2 e, for exp2: Triton's tutorial's
    ``qk_scale``), the scores read back in base e."""
    q, k = f.q, f.k
    exact = q @ k.transpose(-2, -1) * f.scale
    c = f.scale * factor
    if on_q is None:  # (a negative scale's sign goes to q)
        root = math.sqrt(abs(c))
        folded = _r(q * math.copysign(root, c), dtype) @ _r(k * root, dtype).transpose(-2, -1)
    else:
        folded = (_r(q * c, dtype) @ k.transpose(-2, -1)) if on_q else (q @ _r(k * c, dtype).transpose(-2, -1))
    return folded / factor - exact


LOG2E = 1.0 / math.log(2.0)


def _folded(f, dtype, on_q: bool, factor: float = 1.0):
    """The scale (times ``factor``) multiplied into q (or k) and stored in the dtype before the matmul."""
    return _finish(_scores(f) + _fold_error(f, dtype, on_q, factor), f, dtype)


def _fold_q(f, dtype):
    return _folded(f, dtype, True)


def _fold_k(f, dtype):
    return _folded(f, dtype, False)


def _fold_both(f, dtype):
    return _folded(f, dtype, None)


def _softmax_half(f, dtype, half=None):
    h = half or dtype  # exp and the sum in the half dtype (the case's own, or one a full-precision case is cast to)
    s = _scores(f)
    m = s.amax(dim=-1, keepdim=True)
    p = _r((s - torch.where(torch.isfinite(m), m, 0.0)).exp(), h)
    total = _r(p.sum(dim=-1, keepdim=True), h)
    return _finish(s, f, dtype, _r(p / torch.where(total == 0, 1.0, total), h))


def _softmax_cast(f, dtype, half):
    s = _r(_scores(f), half)  # the scores cast to the half dtype, a softmax that rounds its weights once
    dead = torch.isneginf(s).all(dim=-1, keepdim=True)
    P = torch.softmax(torch.where(dead, 0.0, s), dim=-1).masked_fill(dead, 0.0)
    return _finish(s, f, dtype, _r(P, half))


def _softmax_half_blocks(f, dtype, half=None):
    h = half or dtype  # torch.softmax on half scores: each block's sum rounded, the sum of blocks rounded
    s = _scores(f)
    m = s.amax(dim=-1, keepdim=True)
    p = _r((_r(s, h) - _r(torch.where(torch.isfinite(m), m, 0.0), h)).exp(), h)
    total = torch.zeros_like(p[..., :1])
    for j in range(0, p.shape[-1], BLOCK):
        total = _r(total + _r(p[..., j:j + BLOCK].sum(dim=-1, keepdim=True), h), h)
    return _finish(s, f, dtype, _r(p / torch.where(total == 0, 1.0, total), h))


def _sum_cast(f, dtype, half):
    """The running sum kept in a fixed half dtype between blocks of :data:`BLOCK` keys, whatever the case's dtype (an
    online softmax whose l is stored in half)."""
    return _sum_running(f, dtype, half, BLOCK)


def _scale32(f, dtype):
    s = _scores(f)  # the scale a float32 constant
    return _finish(s * (float(torch.tensor(f.scale, dtype=torch.float32)) / f.scale), f, dtype)


def _all32(f, dtype):
    q, k, v = (t.float() for t in (f.q, f.k, f.v))  # inputs, scores, softmax and P V in float32
    s = (_scores(f) + (q.double() @ k.double().transpose(-2, -1) - f.q @ f.k.transpose(-2, -1)) * f.scale).float()
    dead = torch.isneginf(s).all(dim=-1, keepdim=True)
    P = torch.softmax(torch.where(dead, 0.0, s), dim=-1).masked_fill(dead, 0.0)
    return (P @ v).double()


def _values32(f, dtype):
    return (f.P.float() @ f.v.float()).double()  # the weights right, P V accumulated in float32
