"""Level 5, flash backward: ``flash_backward(q, k, v, out, lse, dout, is_causal, block_q, block_k)`` -> dq, dk, dv.

Level 4's forward returned each query's log-sum-exp, lse_i = log Σ_j exp(s_ij), so a tile's weights
come back as P = exp(S − lse) without a second softmax. Then, tile by tile (scale 1/√d):

    dV += Pᵀ dO      dP = dO Vᵀ      D = rowsum(dO ∘ O)      dS = P ∘ (dP − D)
    dQ += dS K · scale                dK += dSᵀ Q · scale

Graded on the level's own 25 cases -- causal and not, L = S and L != S both ways, three tiles a
side (square ones that divide L = S, and partial last ones), float64 and float32, scores in the hundreds, with out
and lse as a right level 4 forward returns them -- against the float64 oracle's gradients under
verify's rule (PyTorch's own backward in the same dtype sets the limit). The learner's function runs
under ``torch.inference_mode()``, where autograd records nothing: a backward that asks autograd for
its gradients fails there, and the check says so -- a fact read from where the error was raised
(torch.autograd's backward or grad), not from its message. Slips are named from dq, dk, dv
(:mod:`.grads` computes each one's): D, the transposes, the scale, the lse, the mask, the sums.
"""

from __future__ import annotations

import math
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

from attnlab.judge import oracle, rule

from . import grads, own, ways

SHAPES = ((1, 1, 24, 24, 8, 8), (1, 2, 37, 37, 16, 13), (2, 1, 30, 30, 32, 10), (1, 2, 20, 45, 16, 7),
          (1, 2, 45, 20, 16, 16), (1, 1, 26, 61, 8, 9))  # (batch, heads, L, S, d, block_q); block_k = block_q * S // L
# (the first: one head, square tiles -- where a per-row (..., L) vector that lost its last axis broadcasts along the
# keys and gives numbers instead of an error, as k.T does on the attention levels' probe of equal sizes)
CASES = tuple((f"{'causal' if c else 'full'}, L = {L}, S = {S}, d = {d}, tiles {bq} x {bq * S // L}"
               + (", batch 2" if B > 1 else "") + (", larger scores" if i == 2 and dt == "float32" else ""),
               (B, H, L, S, d), c, dt, 3.0 if (i == 2 and dt == "float32") else 1.0, (bq, bq * S // L))
              for dt in ("float64", "float32") for c in (True, False)
              for i, (B, H, L, S, d, bq) in enumerate(SHAPES)) + (  # square tiles that divide L = S (cases 0, 2)
    # and not; then scores in the hundreds, float32: where exp of a score overflows (past 88), so weights rebuilt
    # as exp(s) / exp(lse) are inf / inf; exp(s - lse) never is
    ("causal, L = S = 40, d = 8, tiles 16 x 16, scores in the hundreds", (1, 2, 40, 40, 8), True, "float32", 12.0,
     (16, 16)),)
SEQS = (512, 1024, 2048)  # long enough that the tiles, not the fixed costs, set the slope
MEASURES = "its time and peak memory at T = " + ", ".join(map(str, SEQS)) + ", causal, 64 x 64 tiles"
QUANTITIES = ("dq", "dk", "dv")
AUTOGRAD = ("backward", "grad")  # torch.autograd's functions a backward that asks autograd calls


def inputs(i: int, seed: int):
    """Case ``i``'s inputs, drawn from the seed: q, k, v, dout in the case's dtype, and out and lse from a float64
    forward (rounded to the dtype, as a right level 4 forward returns them)."""
    _, (B, H, L, S, d), causal, dtype, mag, _ = CASES[i]
    g = torch.Generator().manual_seed(seed * 100 + i)
    q = torch.randn(B, H, L, d, generator=g, dtype=torch.float64) * mag
    k = torch.randn(B, H, S, d, generator=g, dtype=torch.float64) * mag
    v = torch.randn(B, H, S, d, generator=g, dtype=torch.float64)
    dout = torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    out, lse = grads.forward64(q, k, v, causal)
    dt = getattr(torch, dtype)
    return tuple(t.to(dt) for t in (q, k, v, out, lse, dout))


def run(fn, header: dict) -> dict:
    """In the learner's process: each case under inference mode (no autograd), or the level's measurement."""
    if header.get("what") == "measure":
        return measure(fn, header)
    if header.get("what") == "extra":
        return {}
    cases = []
    for i in own.indices(header, len(CASES)):
        _, _, causal, _, _, tile = CASES[i]
        x = inputs(i, header["seed"])
        try:
            with torch.inference_mode():
                got = fn(*x, causal, *tile)
            if not (isinstance(got, (tuple, list)) and len(got) == 3 and all(isinstance(t, torch.Tensor) for t in got)):
                cases.append({"error": f"returned {type(got).__name__}, not the three tensors (dq, dk, dv)"})
                continue
            cases.append({"values": {n: own.pack(t) for n, t in zip(QUANTITIES, got, strict=True)},
                          "dtypes": [str(t.dtype).removeprefix("torch.") for t in got]})
        except Exception as e:
            cases.append({"error": own.said(e), "autograd": asked_autograd(e)})
    return {"cases": cases}


def asked_autograd(e: BaseException) -> bool:
    """Was the error raised inside torch.autograd's backward or grad (the learner's code asked autograd)?"""
    where = Path(torch.autograd.__file__).parent
    return any(f.name in AUTOGRAD and Path(f.filename).parent == where for f in traceback.extract_tb(e.__traceback__))


def _pytorch(x, causal):
    q, k, v, _, _, dout = (t.detach().clone().requires_grad_(True) for t in x)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return dict(zip(QUANTITIES, torch.autograd.grad(out, (q, k, v), dout), strict=True))


def judge(reply: dict, seed: int, name: str = "flash_backward"):
    """(rows, diagnoses, max |yours − the oracle| on dq, dk, dv, the cases' note) from the learner's values."""
    rows, got, right, autograd, dtype_wrong, values_wrong = [], [], [], False, False, False
    replies = reply.get("cases") or [{"error": reply.get("raised", "no answer")}] * len(CASES)
    for i, ((cname, _, causal, dtype, _, _), r) in enumerate(zip(CASES, replies, strict=True)):
        x = inputs(i, seed)
        ref = oracle.reference(*x[:3], is_causal=causal, grad_out=x[5])
        ref = dict(zip(QUANTITIES, ref[1:], strict=True))
        right.append(ref)
        if (gone := own.answered(r, name, cname, dtype)) is not None:
            autograd = autograd or bool(r.get("autograd"))
            rows.append(gone)
            got.append(None)
            continue
        mine = {n: own.unpack(t) for n, t in r["values"].items()}
        if (bad := own.wrong_shape(mine, ref)) is not None:
            rows.append(own.row(name, cname, dtype, [], error=f"returned {bad}"))
            got.append(None)
            continue
        got.append(mine)
        theirs = _pytorch(x, causal)
        budget = rule.rounding_floor(*x[:3], is_causal=causal, grad_out=x[5])
        comps = [own.compare(n, mine[n], theirs[n], ref[n], getattr(torch, dtype), budget[n]) for n in QUANTITIES]
        wrong = [d for d in r["dtypes"] if d != dtype]
        rows.append(own.row(name, cname, dtype, comps, f"returned {wrong[0]} for {dtype} inputs" if wrong else ""))
        values_wrong = values_wrong or not all(c.passed for c in comps)
        if wrong:
            rows[-1].status = "fail"
            dtype_wrong = True
    keys = ["autograd"] if autograd else []
    if dtype_wrong and not values_wrong and all(g is not None for g in got):
        keys.append("dtype")  # every value right, only the dtype not: no slip's answer to look for
    elif any(r.status != "pass" for r in rows):
        keys += own.named(got, right, slip_list(seed), [c[3] for c in CASES], pairs=slip_pairs(seed))
        if not keys and dtype_wrong:
            keys.append("dtype")
    if _overflowed(got, right, rows) and not _slips_overflow(keys, seed):
        keys.insert(0, "measured:overflow")
    errs = [max(float((m[n].double() - right[i][n]).abs().max()) for n in QUANTITIES)  # (the match: on the cases of
            for i, m in enumerate(got[:-1]) if m is not None]  # ordinary scores; gradients in the hundreds err more)
    err = max(errs) if errs and len(errs) == len(CASES) - 1 else math.inf
    note = (f"{len(CASES)} cases of the level's own (causal and not, L = S and L != S, three tiles a side, float64 and "
            "float32, scores in the hundreds, out and lse as a right level 4 forward returns them)")
    return rows, own.lines(keys, TEXT, rows), err, note


def _overflowed(got: list, right: list, rows: list) -> bool:
    """The gradients are NaN or infinite on the case of scores in the hundreds (the last), where the answer is finite,
    and finite on every other case: an exp whose argument is a score, not a score minus the lse, overflowed there.
    Other cases may fail beside it by another slip (named by their numbers: every slip's answer is finite), which
    does not make the large scores' NaN; a function that is NaN elsewhere too is not told so from here."""
    last = len(CASES) - 1
    broken = got[last] is not None and any(not bool(torch.isfinite(got[last][n]).all()) and
                                           bool(torch.isfinite(right[last][n]).all()) for n in QUANTITIES)
    return broken and all(g is not None and all(bool(torch.isfinite(g[n]).all()) for n in QUANTITIES)
                          for g in got[:last])


def _slips_overflow(keys: list[str], seed: int) -> bool:
    """Whether a slip named here gives, on the case of scores in the hundreds, gradients past float32's range (or not
    finite) in its float64 answer: then that slip is why the learner's float32 gradients are NaN there (a backward
    with no causal mask rebuilds exp(s - lse) of a hidden score above the lse), not an exp of a score apart from it."""
    last = len(CASES) - 1
    big = torch.finfo(torch.float32).max
    x = tuple(t.double() for t in inputs(last, seed))
    for key, slip in SLIPS:
        if key in keys:
            out = grads.tiled(*x, CASES[last][2], *CASES[last][5], slip)
            if out is not None and any(not bool(torch.isfinite(out[n]).all()) or float(out[n].abs().max()) > big
                                       for n in QUANTITIES):
                return True
    return False


def slip_list(seed: int, both: bool = False):
    """(key, case index -> the slip's dq, dk, dv or None): each one step of the tiled backward done wrong (``both``:
    two at once, keyed by both keys)."""
    cases = {}

    def case(i):  # the case's inputs as the learner's function got them (out, lse rounded to the dtype), once
        if i not in cases:
            cases[i] = tuple(t.double() for t in inputs(i, seed))
        return cases[i]

    def at(slip):  # (not on the case of scores in the hundreds: there float32's own error is a slip's size, and
        # what that case reads is said by _overflowed)
        return lambda i: None if i == len(CASES) - 1 else grads.tiled(*case(i), CASES[i][2], *CASES[i][5], slip)
    return [(key, at(s)) for key, s in SLIPS] if not both else [(keys, at(s)) for keys, s in ways.pairs(SLIPS)]


def slip_pairs(seed: int):
    """Two steps of the backward done wrong at once."""
    return slip_list(seed, both=True)


SLIPS = [  # (key, one step of the tiled backward done wrong)
    ("d-wrong", grads.Slip(D="v")), ("d-wrong", grads.Slip(D="zero")), ("d-wrong", grads.Slip(D="dout")),
    ("d-wrong", grads.Slip(D="dp")), ("d-wrong", grads.Slip(D="tile")), ("d-keepdim", grads.Slip(D="row")),
    ("d-key-tile", grads.Slip(D="key-rows")),
    ("dv-not-transposed", grads.Slip(dv="p")),
    ("dv-not-transposed", grads.Slip(dv="p-whole")), ("dk-not-transposed", grads.Slip(dk="ds")),
    ("scale-missing", grads.Slip(scale="missing")), ("scale-missing", grads.Slip(scale="dq-missing")),
    ("scale-missing", grads.Slip(scale="dk-missing")), ("scale-dv", grads.Slip(scale="dv")),
    ("scale-twice", grads.Slip(scale="twice")), ("lse-other-row", grads.Slip(lse="key")),
    ("lse-other-row", grads.Slip(lse="key-rows")), ("lse-other-row", grads.Slip(lse="column")),
    ("second-softmax", grads.Slip(lse="softmax")), ("second-softmax", grads.Slip(lse="softmax-nan")),
    ("lse-unused", grads.Slip(lse="none")),
    ("mask-missing", grads.Slip(mask=False)), ("ds-sign", grads.Slip(sign=-1.0)),
    ("ds-precedence", grads.Slip(ds="precedence")), ("skip-wrong-side", grads.Slip(skip="after")),
    ("dq-overwritten", grads.Slip(dq="set")), ("dkdv-overwritten", grads.Slip(dkv="set")),
    ("dkdv-overwritten", grads.Slip(dkv="set-v")),
]


TEXT = {
    "measured:overflow": "your gradients are NaN or infinite on the case with scores in the hundreds (finite on every "
                         "other case): an exp of a score overflows float32 past 88. Rebuilt as P = exp(s − lse), the "
                         "weights never overflow (s − lse is never above 0); exp(s) / exp(lse) does: which exp's "
                         "argument can be positive?",
    "autograd": "your backward asks autograd for its gradients (it fails under torch.inference_mode(), where autograd "
                "records nothing): compute dq, dk, dv from the formulas, with no .backward() or autograd.grad",
    "d-wrong": "your D is computed from the wrong tensors: D_i = rowsum(dO ∘ O), the output's gradient times the "
               "output itself, row by row (rowsum(P ∘ dP) equals it only summed over all the row's keys, not one "
               "tile's)",
    "d-key-tile": "your D is sliced at the key tile's range (D[..., j0:j0 + block_k]): each query tile needs its own "
                  "rows' D, D[..., i0:i0 + block_q] -- the same only where the two tiles start together",
    "d-keepdim": "your D has lost its last axis (a sum without keepdim=True): its (..., Bq) lines up with the tile's "
                 "keys, so column j gets query j's D; keep one number per query row, (..., L, 1)",
    "dv-not-transposed": "your dv uses P where Pᵀ belongs: dV = Pᵀ dO, key by key (a tile's dv += P.transpose(-2, -1) "
                         "@ dO of the query tile)",
    "dk-not-transposed": "your dk uses dS where dSᵀ belongs: dK = dSᵀ Q × scale (a tile's dk += dS.transpose(-2, -1) "
                         "@ q of the query tile)",
    "scale-missing": "your dq or dk (or both) miss the scale: the scores were q·k × scale, so dQ = dS K × scale and "
                     "dK = dSᵀ Q × scale",
    "scale-dv": "your dv is multiplied by the scale: the scale is inside the scores, not in P·V: dV = Pᵀ dO",
    "scale-twice": "your dq and dk are multiplied by the scale twice: once, dQ = dS K × scale (s was already "
                   "scaled when P was rebuilt)",
    "lse-other-row": "your weights use the log-sum-exp of another row: query i's weights are exp(s_ij − lse_i), lse "
                     "indexed by the query tile's rows and given a last axis (lse[..., i0:i0 + Bq, None]), not by "
                     "the key, nor lined up with the keys",
    "second-softmax": "your weights are a softmax of each tile's own scores: a tile holds only some of the row's keys; "
                      "P = exp(s − lse), the lse of the whole row, which the forward saved",
    "lse-unused": "your weights are exp(s) without the log-sum-exp: P = exp(s − lse) (the forward's lse is what makes "
                  "each row add up to 1)",
    "mask-missing": "your backward has no causal mask: under is_causal the hidden scores are -inf when P is rebuilt, "
                    "as in the forward",
    "ds-sign": "your dS has the wrong sign: dS = P ∘ (dP − D), not P ∘ (D − dP)",
    "ds-precedence": "your dS is P ∘ dP − D: the parentheses belong around dP − D, dS = P * (dP - D)",
    "skip-wrong-side": "your causal skip leaves out the query tiles after the key tile (qs >= ke), and those see all "
                       "its keys; a query tile is hidden from a key tile only when its last query comes before the "
                       "tile's first key (qe - 1 < ks)",
    "dq-overwritten": "your dq is overwritten by each tile of keys instead of added to: dq[rows of the query tile] += "
                      "dS @ k_tile (only the last tile's part is left)",
    "dkdv-overwritten": "your dk or dv of a key tile is overwritten by each tile of queries instead of added to: sum "
                        "dSᵀ Q and Pᵀ dO over every query tile (+=, not =)",
    "dtype": "your gradients are not in the inputs' dtype: compute in float32 if you like, but return q.dtype",
}


def measure(fn, header: dict) -> dict:
    """Time and extra peak memory of one causal backward call at each length (64 x 64 tiles, one head of width 64,
    float32)."""

    def inputs(T, g):
        q, k, v, dout = (torch.randn(1, 1, T, 64, generator=g) for _ in range(4))
        out, lse = (t.float() for t in grads.forward64(q, k, v, True))
        return q, k, v, out, lse, dout

    def call(*args):
        with torch.inference_mode():
            return fn(*args, True, 64, 64)

    return own.measure_lengths(SEQS, header["seed"], inputs, call, "one causal backward call per length, batch 1, "
                               "one head of width 64, float32, 64 x 64 tiles, under inference mode")


def measured_ok(result) -> tuple[bool | None, str]:
    from . import BY_NAME, forwards

    if result.exponents.get("memory") is None:
        return None, "its memory was not measured at two lengths or more"
    return forwards.memory_ok(result, BY_NAME["backward"].growth)


def check(learner, quick=False, seed=0, progress=None, on_stage=None, budget_s=20.0):
    from . import BY_NAME

    return own.check(BY_NAME["backward"], learner, own.asker(learner),
                     lambda reply, s: judge(reply, s, learner.name), seed=seed, on_stage=on_stage, budget_s=budget_s,
                     measured_in=lambda: own.fresh_asker(learner))  # its memory measured in a heap of its own
