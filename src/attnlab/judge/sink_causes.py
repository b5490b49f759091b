"""What a kernel with attention sinks gets wrong, named only where an answer the bug would give reproduces it.

Each cause here is a wrong answer computed from the oracle, held to the failing numbers as every cause of the judge is:

* the output (:func:`alternatives`, changes of the oracle's arguments that :mod:`attnlab.judge.explain` holds row by
  row): the sinks left out (which is also a sink left out of the normaliser: the max cancels), one head's sink for
  every head, the sink read by the kv head's index, by the query's position, or added once per key tile of an
  online softmax (its exp counted T times in the sum: the sink plus ln T);
* the log-sum-exp (:func:`lse_without_sink`): the keys' alone, the sink left out;
* the sinks' gradient (:func:`gradient_hints`, where the output is right): zero (or none), the sign flipped, a factor
  of ``-Σ P_sink (dO · O)`` left out, or reduced over the wrong axes.

A row that sees no key holds zeros with sinks too, so NaN there (the max taken over the keys alone, -inf) is the
judge's ``dead-rows`` line. The log-sum-exp's and the gradient's readings are held to the function's passing cases
by :func:`refuted` (an output reading, by :mod:`attnlab.judge.confirm`): a reading that would have failed a case the
function passed is not its bug. What the failing numbers are is said whether or not a cause fits (:func:`measured`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlab.judge import explain, oracle
from attnlab.judge.cases import Case
from attnlab.judge.facts import Cause

_RULE = ("w_ij = exp(s_ij) / (Σ_j exp(s_ij) + exp(sinks[h])) for query head h, the sink's own weight dropped")
_GRAD = "d sinks[h] = -Σ over b and i of P_sink,i (dO_i · O_i) over head h's rows, P_sink,i = exp(sinks[h] - lse_i)"
_S = ("sinks",)
CAUSES = (
    Cause('sinks', 'only cases with sinks fail: ' + _RULE + '; a row that sees no key gives the sink all its weight '
                   '(output 0, lse the sink)', tags=_S),
    Cause('sink-ignored', 'the sinks are ignored: the output is attention without them (a sink left out of the '
                          "softmax's sum leaves it out whatever the max): " + _RULE, scope=_S),
    Cause('sink-head', "one head's sink is used for every head (sinks[0], or the last): " + _RULE, scope=_S),
    Cause('sink-kv-head', 'the sink is read by the kv head (sinks[h // G], or h % Hkv): the sinks are one per query '
                          'head, ' + _RULE, scope=_S),
    Cause('sink-query', "the sink is read by the query's position (sinks[i % H] for row i), not by its head: "
                        + _RULE, scope=_S),
    Cause('sink-per-tile', 'the sink is added to the sum once per key tile (its weight counted T times: the sink '
                           "plus ln T): fold it into each row's sum once, after its last tile", scope=_S),
    Cause('sink-not-in-lse', 'the log-sum-exp leaves the sink out: lse_i = log(Σ_j exp(s_ij) + exp(sinks[h])), and a '
                             'row that sees no key has lse = sinks[h]', scope=_S),
    Cause('dsink-zero', 'the sinks get no gradient (zero, or none reaches them): ' + _GRAD, scope=_S),
    Cause('dsink-sign', "the sinks' gradient has the wrong sign: " + _GRAD, scope=_S),
    Cause('dsink-form', "the sinks' gradient leaves a factor out (P_sink,i, or D_i = dO_i · O_i): " + _GRAD, scope=_S),
    Cause('dsink-axis', "the sinks' gradient is reduced over the wrong axes (one batch element, the heads of a kv "
                        'group, every head, or a mean): ' + _GRAD, scope=_S),
)
BLOCKS = (16, 32, 64, 128)  # the key tiles a kernel's online softmax may fold its sink into
READ = {"sink-not-in-lse": "lse", "dsink-zero": "dsinks", "dsink-sign": "dsinks", "dsink-form": "dsinks",
        "dsink-axis": "dsinks"}  # the readings of one quantity (not the output), held to passing cases by refuted()
MARGIN = 4.0  # as attnlab.judge.confirm.MARGIN: a reading predicts a failure this many limits from the right answer
MAX_CASES = 40  # passing sink cases a reading is held to, at most


def _rows(kw: dict) -> torch.Tensor:
    """The question's sinks as one logit per row, (1 or N, H, L); ValueError where it has none."""
    s = kw.get("sinks")
    if s is None:
        raise ValueError("no sinks to read otherwise")
    H, L = kw["query"].shape[-3], kw["query"].shape[-2]
    return s.reshape(1, H, 1).expand(1, H, L) if s.dim() == 1 else s


def _read_from(heads: list[int]):
    return lambda kw: {**kw, "sinks": _rows(kw)[:, heads, :]}


def _per_query(kw: dict) -> dict:
    s = kw.get("sinks")
    if s is None or s.dim() != 1:
        raise ValueError("the per-head sinks, as given, are read by position")
    H, L = kw["query"].shape[-3], kw["query"].shape[-2]
    return {**kw, "sinks": s[torch.arange(L) % H].view(1, 1, L).expand(1, H, L)}


def _per_tile(kw: dict, block: int, every: bool) -> dict:
    """Each row's sink plus ln T: T the key tiles of ``block`` the row's loop visits (every one, or those holding a
    key the row sees)."""
    from attnlab.judge.hypotheses import _seen

    S = kw["key"].shape[-2]
    seen = None if every else _seen(kw)
    if seen is None:
        tiles = torch.tensor(float(-(-S // block))).view(1, 1, 1)
    else:
        pad = F.pad(seen, (0, (-S) % block)).reshape(*seen.shape[:-1], -1, block)
        tiles = pad.any(-1).sum(-1).double().clamp_min(1)
        tiles = tiles.reshape(-1, *tiles.shape[-2:]) if tiles.dim() > 3 else tiles.reshape(
            (1,) * (3 - tiles.dim()) + tuple(tiles.shape))
    return {**kw, "sinks": _rows(kw) + tiles.log()}


def alternatives(case: Case):
    """The wrong readings of a sink case's sinks, as changes of the oracle's arguments (each a variant of its key)."""
    if not case.sinks:
        return
    A = explain.Alternative
    H, Hkv, L, S = case.H, case.Hkv or case.H, case.L, case.S or case.L
    G = H // Hkv
    yield A("sink-ignored", lambda kw: {**kw, "sinks": None})
    ident = list(range(H))
    for heads in dict.fromkeys((tuple([0] * H), tuple([H - 1] * H))):
        if list(heads) != ident:
            yield A("sink-head", _read_from(list(heads)))
    for heads in dict.fromkeys((tuple(h // G for h in range(H)), tuple(h % Hkv for h in range(H)))):
        if list(heads) != ident:
            yield A("sink-kv-head", _read_from(list(heads)))
    if H > 1 and L > 1:
        yield A("sink-query", _per_query)
    for b in BLOCKS:
        if b < S:
            for every in (True, False):
                yield A("sink-per-tile", lambda kw, b=b, every=every: _per_tile(kw, b, every))


def _parts(f: oracle.Forward, grad_out) -> tuple[torch.Tensor, torch.Tensor]:
    """(P_sink, D): each row's sink weight and D_i = dO_i · O_i, (N, H, L), from the oracle's forward."""
    dO = grad_out.detach().double().cpu().reshape(f.out.shape)
    return f.sink_P, (dO * f.out).sum(-1)


def gradient_readings(P: torch.Tensor, D: torch.Tensor, groups: int):
    """(key, d sinks (H,)) of each wrong reading of the sinks' gradient, from each row's sink weight ``P`` and
    ``D`` (N, H, L): zero; the sign flipped; a factor left out; reduced over other axes."""
    N, H, _ = P.shape
    right = -(P * D).sum(dim=(0, 2))
    yield "dsink-zero", torch.zeros_like(right)
    yield "dsink-sign", -right
    yield "dsink-form", -P.sum(dim=(0, 2))
    yield "dsink-form", -D.sum(dim=(0, 2))
    yield "dsink-form", -(P * (1 - P) * D).sum(dim=(0, 2))
    if N > 1:
        yield "dsink-axis", -(P[:1] * D[:1]).sum(dim=(0, 2))
    if groups > 1:
        yield "dsink-axis", right.view(-1, groups).sum(1).repeat_interleave(groups)
    if H > 1:
        yield "dsink-axis", right.sum().expand(H)
    yield "dsink-axis", -(P * D).mean(dim=(0, 2))


def gradient_hints(case: Case, x, mine: tuple, exp, comps) -> list[str]:
    """The readings of the sinks' gradient a failing one is (the output right): each whose d sinks is the function's,
    to within the rule's limit, and at least twice that from the right one (a gradient that came back as None
    reads as zeros)."""
    from attnlab.judge.judge import quantities

    names = quantities(case)
    comp = next((c for c in comps if c.quantity == "dsinks"), None)
    if comp is None or comp.passed or "dsinks" not in names or exp.fwd.sink_P is None:
        return []
    i = names.index("dsinks")
    ref = exp.ref[i]
    got = mine[i] if i < len(mine) and mine[i] is not None else torch.zeros_like(ref)
    got = got.detach().double().cpu().reshape(ref.shape)
    P, D = _parts(exp.fwd, x.grad_out)
    found = [key for key, alt in gradient_readings(P, D, exp.fwd.groups)
             if float((got - alt).abs().max()) <= comp.allowed and float((alt - ref).abs().max()) > 2 * comp.allowed]
    return [explain.TIE.join(dict.fromkeys(found))] if found else []


def keys_lse(f: oracle.Forward) -> torch.Tensor:
    """Each row's log-sum-exp over its keys alone (N, H, L): the sink left out (-inf where a row sees no key)."""
    return f.lse + f.P.sum(-1).log()


def lse_without_sink(mine, ref: torch.Tensor, f: oracle.Forward | None) -> bool:
    """Whether a failing log-sum-exp is the keys' alone, the sink left out: on every row that sees a key within a
    coarse 1e-2 of it (these say which formula, not how well), infinite or NaN where a row sees none, and that reading
    not the right one."""
    if f is None or f.sinks is None or not isinstance(mine, torch.Tensor) or mine.numel() != ref.numel():
        return False
    m = mine.detach().double().cpu().reshape(ref.shape)
    alt = keys_lse(f)
    keyed = f.P.sum(-1) > 0
    near = 1e-2 * (1 + ref.abs())
    if not bool(((m - alt).abs() <= near)[keyed].all()) or bool(torch.isfinite(m[~keyed]).any()):
        return False
    return bool(((alt - ref).abs() > near)[keyed].any()) or bool((~keyed).any())


def measured(case: Case, x, mine: tuple, exp, comps) -> list[dict]:
    """What a failing sink case's numbers are, where its output is right, said whether or not a cause fits: the
    sinks' gradient per head beside the spec's, and the log-sum-exp of the row that differs most beside the spec's
    and the keys' alone."""
    if not case.sinks or mine is None or exp.fwd is None or exp.fwd.sink_P is None:
        return []
    failed = {c.quantity for c in comps if not c.passed}
    if "out" in failed:  # the output wrong: the lse and gradient follow from it, and are its cause's to say
        return []
    from attnlab.judge.judge import quantities

    names = quantities(case)
    out = []
    if "dsinks" in failed and "dsinks" in names:
        i = names.index("dsinks")
        got = mine[i] if i < len(mine) else None
        out.append(_dsinks_said(got, exp.ref[i]))
    if "lse" in failed and isinstance(mine[-1], torch.Tensor) and mine[-1].numel() == exp.fwd.lse.numel():
        out.append(_lse_said(case, mine[-1].detach().double().cpu().reshape(exp.fwd.lse.shape), exp.fwd))
    return out


def _numbers(t: torch.Tensor) -> str:
    shown = ", ".join(f"{float(v):.4g}" for v in t.flatten()[:8])
    return f"[{shown}{', ...' if t.numel() > 8 else ''}]"


def _dsinks_said(got, ref: torch.Tensor) -> dict:
    """d sinks per head, the function's beside the spec's, and what relates them (zero, one factor, none)."""
    text = f"d sinks per head: yours {_numbers(got) if got is not None else 'None'}; the spec's {_numbers(ref)}"
    g = torch.zeros_like(ref) if got is None else got.detach().double().cpu().reshape(ref.shape)
    big = ref.abs() > 1e-3 * float(ref.abs().max())
    if float(g.abs().max()) <= 1e-6 * max(float(ref.abs().max()), 1e-30):
        pattern, said = "zero", "yours is zero (or no gradient reached the sinks)"
    elif big.any() and float((g[big] / ref[big]).std() if big.sum() > 1 else 0) < 1e-3:
        c = float((g[big] / ref[big]).mean())
        pattern, said = f"factor {c:.3g}", f"yours is {c:.4g} times the spec's on every head"
    else:
        pattern, said = "differs", "no one factor relates them"
    return {"kind": "dsinks", "text": f"{text}: {said} ({_GRAD})", "map": [], "pattern": f"dsinks {pattern}",
            "rule": None}


def _lse_said(case: Case, m: torch.Tensor, f: oracle.Forward) -> dict:
    """The log-sum-exp of the row furthest from the spec's, beside the spec's and the keys' alone; and on how many
    of the rows that differ it is the keys' alone."""
    ref, keys = f.lse, keys_lse(f)
    d = torch.nan_to_num((m - ref).abs(), nan=math.inf)
    n, h, i = (int(t) for t in torch.nonzero(d == d.max())[0])
    far = d > 1e-2 * (1 + ref.abs())
    alone = far & (((m - keys).abs() <= 1e-2 * (1 + ref.abs())) | (torch.isinf(m) & torch.isneginf(keys)))
    where = f" (batch {n}, head {h})" if f.lse.shape[0] > 1 else f" (head {h})"
    text = (f"the log-sum-exp of query {i}{where} is {float(m[n, h, i]):.6g}; the spec's {float(ref[n, h, i]):.6g} "
            f"= log(Σ_j exp(s_ij) + exp({float(f.sinks[n, h, i]):.4g})), the keys' alone {float(keys[n, h, i]):.6g}")
    if far.any():
        text += f"; yours is the keys' alone on {int(alone.sum())} of the {int(far.sum())} rows that differ"
    return {"kind": "lse", "text": text, "map": [], "pattern": "lse keys alone" if far.any() and bool(
        (alone == far).all()) else "lse sinks", "rule": None}


def refuted(keys: set[str], rows, cases: dict, seed: int, inputs) -> set[str]:
    """The log-sum-exp's and the gradient's readings among ``keys`` that a passing sink case refutes: every variant of
    the reading would have been further than MARGIN times that quantity's limit from the right answer there (the
    reading's answer computed from the case's own oracle), and the function passed it."""
    todo = {k for k in keys if k in READ}
    gone: set[str] = set()
    passing = [r for r in rows if r.status == "pass" and (r.case, r.dtype) in cases
               and cases[(r.case, r.dtype)].sinks]
    for r in sorted(passing, key=lambda r: cases[(r.case, r.dtype)].work)[:MAX_CASES]:
        limits = {c.quantity: c.allowed for c in r.comparisons}
        left = {k for k in todo - gone if READ[k] in limits}
        if not left:
            continue
        case = cases[(r.case, r.dtype)]
        x = inputs(case, case.seed(seed))
        ref, f = oracle.answer(x.q, x.k, x.v, x.oracle_mask, case.is_causal, case.scale, case.gqa, grad_out=x.grad_out,
                               sinks=x.sinks)
        for key in left:
            far = MARGIN * limits[READ[key]]
            if READ[key] == "lse":
                keyed = f.P.sum(-1) > 0
                gap = (keys_lse(f) - f.lse)[keyed].abs()
                if bool((~keyed).any()) or (gap.numel() and float(gap.max()) > far):
                    gone.add(key)
                continue
            P, D = _parts(f, x.grad_out)
            alts = [alt for k, alt in gradient_readings(P, D, f.groups) if k == key]
            if alts and all(float((alt - ref[-1]).abs().max()) > far for alt in alts):
                gone.add(key)
    return gone
