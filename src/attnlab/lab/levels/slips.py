"""The slips a learner makes writing attention, each as the output it gives: the learner's output is compared with them.

A slip is named only when the learner's own output, on every probe where the slip's answer differs
from the right one, is the slip's answer (values, not messages): "your function divides by √S"
because it returned exactly what attention divided by √S returns. The probes are small inputs --
causal, and for the levels that take ``is_causal`` not, L = S and L != S, one with every size
equal (where ``k.T`` on a batched tensor gives numbers instead of an error) -- float64 (where a
learner's function computes in float64, the match is to rounding) and one float32 case with large
logits (where a softmax without the max subtraction overflows). The right answer is the judge's
float64 oracle; every slip's is computed here, on the probe's own inputs and in their dtype, never
by the learner's code. A row the slip leaves with no weight at all (NaN) says nothing either way.

The learner's function runs in its own process (:func:`answers`, asked by ``attnlab lab check``):
what comes back is its numbers on the probes. Each slip's line says what the learner's function
did, in their terms, and what it should do.
"""

from __future__ import annotations

import math
import re

import torch

from attnlab.judge import Case, Diagnosis, oracle, readings, rule
from attnlab.judge import verify as V

from . import scalefit, ways

PROBES = (  # the always-causal levels' (1, 2)
    Case("probe", batch=(1,), H=2, L=24, E=8, is_causal=True, dtype="float64"),
    Case("probe, d = 16", batch=(1,), H=1, L=19, E=16, is_causal=True, dtype="float64"),
    Case("probe, L < S", batch=(1,), H=2, L=12, S=20, E=8, is_causal=True, dtype="float64"),
    Case("probe, L > S", batch=(1,), H=2, L=20, S=12, E=8, is_causal=True, dtype="float64"),
    Case("probe, every size 4", batch=(4,), H=4, L=4, E=4, is_causal=True, dtype="float64"),
    Case("probe, large logits", batch=(1,), H=2, L=20, E=8, is_causal=True, dtype="float32", magnitude=30.0),
)

# graded beside the grid's cases at every attention level: scores in the thousands, where a hidden score set to a
# finite number (-100) is beaten and a softmax without its max overflows (the grid's largest are in the hundreds)
LARGE = Case("scores in the thousands, causal", batch=(1,), H=2, L=40, E=8, is_causal=True, magnitude=30.0)
# values wider than the queries and keys, causal: the grid's one case of Ev != E is not causal, so an always-causal
# function never met one (a scale of 1/sqrt(Ev), a value tile cut at the key width passed every case)
WIDE_V = Case("values wider than the keys: E = 24, Ev = 40, causal", batch=(1,), H=2, L=29, E=24, Ev=40,
              is_causal=True)

TEXT = {
    "starter": "untouched starter: {n} TODOs left -- it is the starter's code as it came; do the TODOs, then check "
               "it again",
    "max-subtraction": "large scores overflow in your softmax (NaN or inf where the answer is finite): subtract each "
                       "row's largest score before exp, which overflows float32 near 88",
    "measured:overflow": "large scores overflow in your softmax: NaN or inf where the answer is finite, on the "
                         "probes with scores in the thousands (finite on the others). A softmax with no max "
                         "subtracted overflows so, and so does one whose max is not each row's largest score so far "
                         "(exp of a score minus less than the row's largest overflows float32 near 88): which max "
                         "does each exp subtract?",
    "unscaled": "your scores are not scaled: divide each q·k by √d, d = q.shape[-1] (the head width)",
    "scale-1/d": "your scores are divided by d, not by √d: the scale is 1 / math.sqrt(q.shape[-1])",
    "scale-inverted": "your scores are multiplied by √d, not divided by it: the scale is 1 / math.sqrt(q.shape[-1])",
    "scale-length": "your scores are divided by the square root of a length (the number of queries or of keys); "
                    "divide by √d, the square root of the head width q.shape[-1]",
    "softmax-dim": "your softmax runs over the wrong axis: your weights add up to 1 down each column (over the "
                   "queries, dim=-2); each query's weights over the keys (dim=-1) must add up to 1",
    "max-axis": "your softmax subtracts the largest score of each column (over the queries), not of each row: a "
                "shift must be the same for all of a query's keys (amax over dim=-1)",
    "unnormalised": "your weights are never normalised: after exp, divide each query's weights by their sum, so they "
                    "add up to 1",
    "peeks-ahead": "your mask lets query i see one key ahead (key i + 1): query i may see keys 0 .. i only; is a loop "
                   "bound or the j > i test off by one?",
    "causal-reversed": "your mask is turned round: your query i sees itself and the keys after it (j >= i) and none "
                       "before; it should see keys 0 .. i and hide the keys after it (j > i)",
    "diagonal": "your mask also hides the diagonal: query i must see itself, key i (hide j > i, not j >= i)",
    "mask-zero": "your masked scores are set to 0, not -inf: a future key still gets weight exp(0); make them -inf",
    "mask-after-softmax": "your mask comes after the softmax: the visible weights no longer add up to 1; set the "
                          "hidden scores to -inf before the softmax",
    "causal-ignored": "your function has no causal mask yet: query i also sees the keys after it; hide j > i",
    "lower-right": "your causal mask is aligned at the bottom right (query i sees keys j <= i + S - L): it is aligned "
                   "at the top left, as PyTorch's is_causal=True -- query i sees keys 0 .. i, whatever L and S",
    "scores-transposed": "your scores are transposed: entry (i, j) must be query i against key j, q @ kᵀ (q[i]·k[j]); "
                         "yours is key i against query j (k @ qᵀ, or the indices swapped)",
    "k-T": "your k.T reverses every axis of a batched k, (B, H, S, d) -> (d, S, H, B): transpose only the last two, "
           "k.transpose(-2, -1) (or k.mT)",
    "out-is-v": "your output is each query's own value row, v[i]: the weighted sum must run over the keys, "
                "Σ_j w_ij · v[j] (is v indexed by the query, i, instead of the key, j?)",
    "scale-after-softmax": "your scale is applied after the softmax, to the weights: it belongs inside, on the "
                           "scores, softmax(q·k / √d); scaled weights no longer add up to 1",
    "max-before-mask": "your softmax subtracts the row's largest score taken before the mask, over the hidden keys "
                       "too: where a hidden score is far larger, every visible exp underflows to 0 and the row is "
                       "0 / 0; take the max after masking",
    "mask-finite": "your masked scores are set to a finite number (like -100), which a large score beats: a hidden "
                   "key then still gets weight; make them -inf (or the dtype's lowest value)",
    "square-assumed": "your function assumes L = S (it answers only where the numbers of queries and keys are "
                      "equal): build the mask as (L, S), from q.shape[-2] and k.shape[-2]",
    "causal-always": "your function masks the keys after each query even when is_causal is False: mask only under "
                     "is_causal",
}


def starter_line(level) -> Diagnosis:
    """What an untouched starter is told, at every level: that it is one, with its TODOs left, and nothing else
    (its failures are the starter's, not the learner's: no slip of theirs is named from them)."""
    text = level.starter_text()
    n = len(set(re.findall(r"TODO (\d+)", text))) or text.count("TODO")
    return Diagnosis("starter", TEXT["starter"].format(n=n))

def common(always_causal: bool = False):
    """(key, (q, k, v, causal) -> the slip's output or None): the slips of attention itself, at every attention
    level (:data:`.ways.COMMON`), computed on the probe's inputs in their dtype (``always_causal``: a level whose
    function takes no is_causal, which cannot mask when it should not)."""
    return [(key, _at(w)) for key, w in ways.COMMON if not (always_causal and w.mask == "always")]


def common_pairs(always_causal: bool = False):
    """((key, key), slip): two of attention's slips at once, for an output no single one explains."""
    entries = [(key, w) for key, w in ways.COMMON if not (always_causal and w.mask == "always")]
    return [(keys, _at(w)) for keys, w in ways.pairs(entries)]


def _at(way):
    return lambda q, k, v, causal: ways.attention(q, k, v, causal, way)


def answers(call, probes, seed: int) -> list[dict | None]:
    """In the learner's process: ``call(q, k, v, case)`` -> {"out": ..., ["lse": ...]} on each probe, as plain
    values (None where it raised or returned no tensors of the right shape)."""
    from .own import pack

    got = []
    for i, case in enumerate(probes):
        x = V.inputs(case, seed + i)
        try:
            with torch.no_grad():
                out = call(x.q, x.k, x.v, case)
        except Exception:  # a function that raises is told so by the graded cases
            out = None
        if isinstance(out, torch.Tensor):
            out = {"out": out}
        ok = isinstance(out, dict) and all(isinstance(t, torch.Tensor) for t in out.values()) and tuple(
            out.get("out", torch.zeros(0)).shape) == tuple(x.q.shape[:-1] + x.v.shape[-1:])
        got.append({n: pack(t) for n, t in out.items()} if ok else None)
    return got


def named(got: list, probes, seed: int, slips, nan_key: str | None = None, pairs=(), fitted: list | None = None,
          measured: dict | None = None) -> list[str]:
    """The keys of the slips whose answers the learner's outputs are (``got``: :func:`answers`' reply), in the order
    of ``slips``, by the judge's reading rule (:mod:`attnlab.judge.readings`); ``nan_key``: the level's line for an
    output that is NaN everywhere, even on small scores; ``pairs``: ((key, key), slip) -- two slips at once, tried
    where no single one is the learner's output; ``fitted``: a list given is extended with the named slips' answers
    (``slip(q, k, v, causal)``), for :mod:`.beside`; ``measured``: a dict given gets the words of a line measured
    here (a scale fitted beside a mask slip: :mod:`.scalefit`), by its key."""
    from .own import unpack

    live = []
    for i, (case, g) in enumerate(zip(probes, got, strict=True)):
        if g is not None:
            x = V.inputs(case, seed + i)
            live.append((case, x.q, x.k, x.v, {n: unpack(t).double() for n, t in g.items()}))
    if not live:
        return []
    right = [answer(c, q, k, v) for c, q, k, v, _ in live]
    mine = [o for *_, o in live]
    dtypes = [c.dtype for c, *_ in live]
    calm = [(o, r) for (c, *_, o), r in zip(live, right, strict=True) if not c.magnitude > 1]
    over = [c.magnitude > 1 and bool((~torch.isfinite(o["out"]) & torch.isfinite(r["out"])).any())
            for (c, *_, o), r in zip(live, right, strict=True)]
    if calm and nan_key and all(not bool(torch.isfinite(o["out"]).any()) for o, _ in calm):
        return [nan_key]
    if _square_only(probes, got, live, right):
        if fitted is not None:  # right where it answers at all: beside it, what the square cases still show
            fitted.append(_right)
        return ["square-assumed"]

    def on_probes(slip):
        return lambda i: slip(*live[i][1:4], live[i][0].is_causal)

    keys = readings.named(mine, right, dtypes, [(k, on_probes(s)) for k, s in slips])
    found = [s for k, s in slips if k in keys]
    if not keys:  # two slips at once, or a mask slip beside a scale of no slip's
        keys, found = _two_at_once(live, mine, right, dtypes, pairs, on_probes, measured)
    if not keys and any(over):  # an overflow in the large probes, and nothing named: it may hide a slip that the
        # probes it left finite show (a scale turned round beside a softmax with no max subtracted); read those alone
        finite = [None if o else m for m, o in zip(mine, over, strict=True)]
        keys = readings.named(finite, right, dtypes, [(k, on_probes(s)) for k, s in slips])
        found = [s for k, s in slips if k in keys]
    if fitted is not None:
        fitted += found
    if any(over) and all(bool(torch.isfinite(o["out"]).all()) for o, _ in calm) and not any(
            _overflows(slip, live, over) for slip in found):
        # an overflow no slip named here explains: said as its cause only where a softmax without the max
        # subtraction overflows in the very rows the learner's did (a max taken, but the wrong one, overflows in
        # others), else as what was measured
        # (where every row overflows either way the rows tell nothing, and a tiled level's max not carried from tile
        # to tile overflows so too: both readings fit, and the measured line says both)
        told = _unshifted(live, over)
        tiled = any(k == "max-not-carried" for k, _ in slips)
        keys.insert(0, "max-subtraction" if told or (told is None and not tiled) else "measured:overflow")
    return keys


def _two_at_once(live, mine, right, dtypes, pairs, on_probes, measured) -> tuple[list[str], list]:
    """(keys, their slips) where no single slip is the output: what every pair that fits says; else a mask slip
    with a scale measured beside it (:mod:`.scalefit`), its words put in ``measured`` (where one is given)."""
    fitting = [(k, s) for k, s in pairs
               if readings.fits(readings.answers_of(on_probes(s), mine), mine, right, dtypes, by_value=True)]
    keys = readings.common([k for k, _ in fitting])
    if keys:
        return keys, [s for k, s in fitting if set(keys) <= set(k)]
    if measured is not None and (fit := scalefit.found(live, mine, right, dtypes)):
        measured["measured:scores"] = SCALED.format(words=fit[1])
        return [fit[0], "measured:scores"], [fit[2]]
    return [], []


SCALED = ("and your scores are multiplied by {words}, d = q.shape[-1] (the head width), not by 1/√d: with that "
          "scale and the mask slip above, attention is your output on every probe (measured: the scale fitted on "
          "each probe, and its law in d)")


def _unshifted(live, over) -> bool | None:
    """True: on every probe with large logits that overflowed, the rows where the learner's output is not finite are the
    rows where exp of the raw scores (no max subtracted, in the working dtype: float32, float64 for float64) is, and
    on one of them at least some rows are finite: a pattern that tells this reading from others; None where the rows
    match but every one overflowed; False where they differ."""
    told = False
    for (case, q, k, v, mine), o in zip(live, over, strict=True):
        if not o:
            continue
        work = torch.float64 if q.dtype == torch.float64 else torch.float32
        q, k, v = q.to(work), k.to(work), v.to(work)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        p = torch.exp(s)
        if case.is_causal:
            p = p.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), 0.0)
        alt = (p @ v) / p.sum(dim=-1, keepdim=True)
        theirs, its = ~torch.isfinite(mine["out"]).all(dim=-1), ~torch.isfinite(alt).all(dim=-1)
        if not torch.equal(theirs, its):
            return False
        told |= bool(its.any()) and not bool(its.all())
    return True if told else None  # None: every row overflows either way, the rows tell no reading from another


def _overflows(slip, live, over) -> bool:
    """The slip's own answer overflows where the learner's did, on the probes with large logits."""
    for (case, q, k, v, mine), o in zip(live, over, strict=True):
        alt = slip(q, k, v, case.is_causal) if o else None
        alt = alt.get("out") if isinstance(alt, dict) else alt
        if alt is not None and bool((~torch.isfinite(mine["out"]) & torch.isfinite(alt)).any()):
            return False
    return any(over)


def _square_only(probes, got, live, right) -> bool:
    """Every probe with L = S answered right (by the reading rule: the right answer read as a reading of its own),
    and every one with L != S gave no answer (it raised)."""
    square = [(c.S or c.L) == c.L for c in probes]
    if all(square) or not any(square):
        return False
    if any(g is not None for g, sq in zip(got, square, strict=True) if not sq):
        return False
    return all(readings.says("out", o["out"], r["out"], r["out"], c.dtype) == readings.NOTHING and
               float((o["out"] - r["out"]).abs().max()) <= rule.reading_tolerance(c.dtype, r["out"], r["out"])
               for (c, *_, o), r in zip(live, right, strict=True))


def _right(q, k, v, causal: bool) -> dict:
    """:func:`answer` as a slip's answer is called: the right one, as the one a function right where it answers is."""
    f = oracle.answer(q.double(), k.double(), v.double(), is_causal=causal)[1]
    return {"out": oracle.unflatten(f.out, f), "lse": f.lse.reshape(q.shape[:-1])}


def answer(case, q, k, v) -> dict:
    """The right {"out", "lse"} of a probe's inputs: the float64 oracle's."""
    return _right(q, k, v, case.is_causal)


def diagnoses(keys, text=TEXT) -> list[Diagnosis]:
    seen = dict.fromkeys(keys)
    return [Diagnosis(k, text[k]) for k in seen]
