"""What the two levels whose function returns (out, lse) share: level 4's tiled forward and level 7's Triton kernel.

* how the grid calls such a function (:func:`sdpa`: F.scaled_dot_product_attention's signature,
  the cases it can answer, :func:`answerable`) and how a reply that is not a pair is told;
* its log-sum-exp, held to the judge's own lse rule (:mod:`attnlab.judge.apis.lse`: the oracle's lse,
  PyTorch's logsumexp in the case's dtype, the rounding floor) on cases of the level's own
  (:func:`lse_values` in the learner's process, :func:`lse_rows` here);
* the work of a causal call against a full one, counted as the multiply-adds of its matrix
  products (``torch.utils.flop_counter``, :func:`work`, :func:`work_row`);
* the lines for what a tiled forward gets wrong (:data:`TEXT`), and its memory against what the
  level asks (:func:`memory_ok`).
"""

from __future__ import annotations

import math

import torch

from attnlab.judge import Row, oracle
from attnlab.judge import verify as V
from attnlab.judge.apis import lse as judged_lse

from . import own

TEXT = {
    "acc-not-rescaled": "your accumulator is not rescaled when the running max grows: multiply acc by exp(m_old − "
                        "m_new) before adding the new tile's exp(s − m_new)·v",
    "sum-not-rescaled": "your running sum is not rescaled when the running max grows: multiply l by exp(m_old − "
                        "m_new) before adding the new tile's exp(s − m_new)",
    "rescale-after-update": "neither your running sum nor your accumulator is rescaled when the max grows (a rescale "
                            "taken after m is updated is exp(m_new − m_new) = 1): alpha = exp(m_old − m_new), "
                            "before m = m_new, multiplies both",
    "rescale-inverted": "your rescale is turned round, exp(m_new − m_old): what was summed against the old max must "
                        "shrink when the max grows, alpha = exp(m_old − m_new)",
    "max-not-carried": "your max is not carried from tile to tile: each tile's exps are taken against that tile's own "
                       "max (added as they are, or rescaled by exp(m_old - m_new), which overflows where a tile's max "
                       "falls far below an earlier one's and gives NaN where a tile hides a row's every key); keep "
                       "m = max(m, the tile's max) and rescale",
    "max-never-updated": "your running max is never updated (m = m_new is missing): m stays −inf, so exp(m − m_new) "
                         "= 0 wipes the sum and the output at every tile, only the last tile counts, and the lse, "
                         "m + log(l), is −inf; end each tile with m = m_new",
    "stale-max": "your exp(s − m) uses the running max from before this tile (m is used before it is updated): take "
                 "the new max first, m_new = max(m, the tile's max), then p = exp(s − m_new)",
    "tile-mask": "your causal mask compares places inside the tiles, not in the sequence: key j0 + c comes after "
                 "query i0 + r when j0 + c > i0 + r",
    "not-divided": "your output is never divided by the running sum: at the end, out = acc / l",
    "lse-no-max": "your lse leaves out the running max: lse = m + log(l) (l was summed against m)",
    "lse-no-sum": "your lse is the running max alone: lse = m + log(l)",
    "lse-base2": "your lse is not in natural log: with the scores in base 2 (times log2 e, for exp2) the max m is in "
                 "base 2 too, and m + log2 l (or m + ln l) is not the lse; return (m + log2 l) · ln 2 (with m in "
                 "natural units, m + ln l: log2 of the sum is not its log)",
    "softmax-half": "your softmax's running sum is kept in half precision (the inputs' bfloat16 or float16): the lse, "
                    "m + log l, carries its rounding at every tile, as the output's division does; keep l (and acc) in "
                    "float32",
    "lse-dtype": "your lse comes back in the inputs' half precision: keep it in float32 (a bfloat16 lse holds 3 "
                 "significant digits, and the backward's exp(s − lse) turns its error into the weights' error)",
    "lse-half": "your lse's values are half precision's (rounded to the inputs' float16 or bfloat16 before they were "
                "stored, and off by that rounding): keep m + log(l) in float32 all the way to the store",
    "float32-in-float64": "your lse's values are float32's in a float64 call (rounded there, .float(), before they "
                          "were stored, and off by that rounding): keep it in the inputs' float64",
    "lse-wrong": "your lse is not the log-sum-exp of the row's scores (log Σ_j exp(s_ij) over the keys the row sees): "
                 "the rows above say by how much",
}


def pair(got, name: str, want: str):
    """``got`` when it is a pair of tensors; else a TypeError saying what came back."""
    if isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got):
        return got
    if isinstance(got, (tuple, list)) and len(got) == 2:  # a pair, but not of tensors: say what it holds
        what = f"a {type(got).__name__} of ({', '.join(type(t).__name__ for t in got)}), not a tensor in each place"
    else:
        what = f"a {type(got).__name__} of {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
    raise TypeError(f"{name} returned {what}, not the pair {want}")


def sdpa(forward, name: str):
    """``forward(q, k, v, is_causal) -> out`` with F.scaled_dot_product_attention's signature, for the grid."""
    def level_form(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or dropout_p or scale is not None or enable_gqa:
            raise TypeError(f"{name} takes (q, k, v, is_causal): no mask, scale, dropout or GQA")
        return forward(query, key, value, bool(is_causal))
    level_form.__name__ = name
    return level_form


def answerable(case) -> bool:
    """A case a function of (q, k, v, is_causal) answers: no mask, the default scale, no dropout, GQA or modifier."""
    return (case.mask is None and case.scale is None and not case.scale_tensor and case.dropout_p == 0
            and (case.Hkv is None or case.Hkv == case.H) and case.mod is None and not case.grad_mask)


def lse_values(lse_of, cases, seed: int) -> dict:
    """In the learner's process: ``lse_of(q, k, v, causal)`` on each case, as plain values (or what it raised)."""
    from .own import pack, said

    out = []
    for case in cases:
        x = V.inputs(case, case.seed(seed))
        try:
            with torch.no_grad():
                out.append({"lse": pack(lse_of(x.q, x.k, x.v, case))})
        except Exception as e:
            out.append({"error": said(e)})
    return {"cases": out}


def lse_rows(reply: dict, cases, name: str, seed: int) -> list[Row]:
    """The lse cases judged by the judge's lse rule: the oracle's, PyTorch's in the dtype, the floor."""
    from .own import unpack

    rows = []
    for case, r in zip(cases, reply.get("cases") or [{"error": "no answer"}] * len(cases), strict=True):
        label = f"log-sum-exp, {case.name}"
        if "error" in r:
            rows.append(own.row(name, label, case.dtype, [], error=r["error"]))
            continue
        x = V.inputs(case, case.seed(seed))
        f = oracle.answer(*(t.double() for t in (x.q, x.k, x.v)), is_causal=case.is_causal)[1]
        ref = f.lse.reshape(x.q.shape[:-1])
        theirs = judged_lse.pytorch(case, x, lambda dtype=None, device=None: (None, [])).reshape(ref.shape)
        mine = unpack(r["lse"])
        # (the level's lse is float64 for float64 inputs, as its starter says: the judge's allowance of a float32 lse
        # there, FlashAttention's interface, is not the level's -- held to float64, a float32 one is read by its bits)
        held = mine.double() if case.dtype == "float64" else mine
        c = judged_lse.compare(held if mine.shape == ref.shape else None, theirs, ref, case,
                               judged_lse.floor(case, f))
        detail = "" if mine.shape == ref.shape else f"lse has shape {tuple(mine.shape)}, not {tuple(ref.shape)}"
        rows.append(Row(name, label, case.dtype, "pass" if c.passed else "fail", comparisons=[c], detail=detail))
    return rows


def lse_stored(reply: dict, cases, rows, seed: int) -> list[str]:
    """["lse-half"] (or in a float64 call, ["float32-in-float64"]) where every failing lse case's values, on the
    rows whose lse stands off their max score, are a narrower dtype's than the tensor that holds them, and off by a
    few of that dtype's roundings: they were rounded there on their way -- a fact of their bits
    (:func:`attnlab.judge.precision.lse_cause`'s reading), not of their error's size; ["softmax-half"] where every
    failing case's lse errs where a running sum kept in half precision does (that reading's direction). Else []."""
    from attnlab.judge import precision
    from attnlab.judge.cases import DTYPES

    from .own import unpack

    held = set()
    for case, r, row in zip(cases, reply.get("cases") or [], rows, strict=False):
        if row.status == "pass":
            continue
        if "lse" not in r:
            return []
        x = V.inputs(case, case.seed(seed))
        f = oracle.answer(*(t.double() for t in (x.q, x.k, x.v)), is_causal=case.is_causal)[1]
        mine = unpack(r["lse"]).double().reshape(f.lse.shape)
        key = precision.lse_cause(DTYPES[case.dtype], f, mine, row.comparisons[0].allowed if row.comparisons else 0.0,
                                  steps=(case.L // 3 + 1, (case.S or case.L) // 3 + 1))  # (level 4's tiles)
        if key not in ("lse-half", "float32-in-float64", "softmax-half"):
            return []
        held.add(key)
    return sorted(held) if len(held) == 1 else []


def lse_half(reply: dict) -> bool:
    """The learner's lse came back in half precision (the inputs' dtype) on some case."""
    return any(r.get("lse", {}).get("dtype") in ("bfloat16", "float16") for r in reply.get("cases") or [])


def work(forward, T: int, block: int) -> dict:
    """In the learner's process: the multiply-adds of the matrix products of a causal and of a full call
    ``forward(q, k, v, causal)`` at length T (one head of width 64, float32), counted by PyTorch's flop counter."""
    from torch.utils.flop_counter import FlopCounterMode

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, T, 64, generator=g) for _ in range(3))
    counted = {}
    for causal in (True, False):
        with torch.no_grad(), FlopCounterMode(display=False) as m:
            forward(q, k, v, causal)
        counted["causal" if causal else "full"] = int(m.get_total_flops())
    return counted


def work_row(reply: dict, name: str, T: int, block: int, most: float) -> tuple[Row, float | None]:
    """The work's row and the ratio of causal to full (None where it was not counted)."""
    label = f"causal work, T = {T}, {block} x {block} tiles"
    n = math.ceil(T / block)
    skipping = (n + 1) / (2 * n)  # the tiles on and below the diagonal, of n² (what skipping the rest leaves)
    if "causal" not in reply:
        return own.row(name, label, "float32", [], error=str(reply.get("error", "no answer"))), None
    causal, full = reply["causal"], reply["full"]
    if not full:
        return Row(name, label, "float32", "skipped", detail="no matrix products were counted (the check counts "
                   "torch's @, matmul, bmm and einsum): the work was not measured"), None
    ratio = causal / full
    ok = ratio <= most
    return Row(name, label, "float32", "pass" if ok else "fail", detail=(
        f"the causal call did {ratio:.0%} of the full call's multiply-adds ({causal:.3g} of {full:.3g} flops, "
        f"counted); skipping the tiles wholly above the diagonal leaves {skipping:.0%}; at most {most:.0%} "
        "passes")), ratio


def memory_ok(result, growth) -> tuple[bool, str]:
    """Whether the memory grew as the level asks, decided only by measurements that decide it: where a length's
    repeated peaks never agreed on their least (:func:`attnlab.lab.measure.undecided`), the verdict is read over the
    whole range of exponents the repeats allow (one repeat per length, every choice) and stands only where it is the
    same over all of it; where the range straddles the level's bounds it is not decided -- not held, and said so,
    never "it did not hold"."""
    from attnlab.lab.measure import undecided

    p = result.exponents.get("memory")
    if p is None:
        return False, "its memory was not measured at two lengths or more"
    fit = (getattr(result, "fits", None) or {}).get("memory")
    fitted = getattr(fit, "lengths", None) or None
    unsure = undecided(result.timings, fitted)
    said = f"memory grew as T^{p:.2f} (the level asks for {growth.asked()})"
    if not unsure:
        return growth.holds(p), said
    low, high = getattr(fit, "low", None), getattr(fit, "high", None)
    lengths = ", ".join(map(str, unsure))
    if low is not None and high is not None:
        every = f"; its peaks at T = {lengths} varied from call to call, and every choice of one repeat per length " \
                f"gives T^{low:.2f} to T^{high:.2f}"
        if growth.holds(low) and growth.holds(high):
            return True, said + every + ", all within what the level asks"
        if (growth.low is not None and high < growth.low) or (growth.high is not None and low > growth.high):
            return False, said + every + ", none of it within what the level asks"
    return False, (f"not decided: its peak memory at T = {lengths} differed from call to call however often it was "
                   "measured (another program's memory in it?), and the exponents its repeats allow"
                   + (f" (T^{low:.2f} to T^{high:.2f})" if low is not None and high is not None else "")
                   + f" lie both within and outside what the level asks ({growth.asked()}), so the growth "
                   f"(T^{p:.2f}) is not read from it; check it again")
