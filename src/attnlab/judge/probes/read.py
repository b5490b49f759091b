"""Reading a probe's answer: what the function computed, set beside what the spec computes, as facts.

A probe's designed inputs (:mod:`.design`) make the function's output a measurement: the weights each query gives
each key, the kv head each query head reads, the score function. :func:`read` turns a failing probe row's output
into :class:`Measured` differences -- "query 3 sees keys 0-22; the spec's keys 0-17: 5 keys after the window's right
edge are seen" -- each with a small map of the first rows that differ. Nothing here names a cause: a name comes from
the alternatives the row's output matched (:mod:`attnlab.judge.explain`), said on top of these facts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from attnlab.judge.probes import design

MAP_ROWS = 4  # rows of a text map
BIAS_MIN = 1e-2  # log-weights that differ less than this (a rounding of the weights) say no bias
SHOWN = "#"  # a key the row gives weight
HIDDEN = "."  # a key it gives none


@dataclass(frozen=True)
class Measured:
    kind: str  # "visibility", "dead-rows", "bias", "sums", "heads", "scores", "lse", "backward"
    text: str  # the difference, in plain words
    map: tuple[str, ...] = field(default_factory=tuple)  # lines of a text map (or values) that show it
    pattern: str = ""  # what two probes' differences share when they are one difference (its words, no numbers)
    rule: dict | None = None  # the difference as a rule other cases can be held to (see attnlab.judge.probes.learned)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, "map": list(self.map), "pattern": self.pattern or self.kind,
                "rule": self.rule}


def read(case, x, mine: tuple, exp, limit: float) -> list[Measured]:
    """The differences a failing probe row's output measures (empty where it measures none)."""
    out = mine[0] if mine else None
    if not isinstance(out, torch.Tensor) or out.shape != exp.ref[0].shape:
        return []
    out = out.detach().double().cpu()
    ref = exp.ref[0]
    kind = case.probe
    if kind == "heads":
        return _heads(case, out, ref)
    if kind == "scores":  # who sees whom first: a score function is read off rows that see the spec's keys
        seen = [m for m in _weights(case, out, ref, limit) if m.kind in ("visibility", "dead-rows")]
        return seen or _scores(case, x, out, ref, mine, exp, limit)
    if case.sinks:  # with sinks a row's weights sum to 1 - w_sink: who sees whom, then the sink's weight (.sinks)
        from attnlab.judge.probes import sinks

        found = [m for m in _weights(case, out, ref, limit) if m.kind in ("visibility", "dead-rows")]
        found += sinks.read(case, out, ref, exp.fwd, limit)
    else:
        found = _weights(case, out, ref, limit)
    if kind == "grads" and len(mine) > 3 and isinstance(mine[3], torch.Tensor):
        found += _backward(case, out, mine[3].detach().double().cpu(), exp.ref[3], limit)
    return found


def _flat(t: torch.Tensor, case) -> torch.Tensor:
    """(..., H, L, D) as (N, H, L, D)."""
    return t.reshape(-1, *t.shape[-3:])


def spans(keys: torch.Tensor) -> str:
    """The True positions of a 1-d bool tensor as runs: "0-4, 7, 9-12" ("none" when there are none)."""
    idx = [int(i) for i in torch.nonzero(keys).flatten()]
    if not idx:
        return "none"
    runs, start, prev = [], idx[0], idx[0]
    for i in idx[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        runs.append(f"{start}" if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(runs)


def _where(case, n: int, h: int) -> str:
    """How a row's batch element and head are said (nothing where the probe has one of each)."""
    parts = []
    if math.prod(case.batch) > 1:
        parts.append(f"batch {n}")
    if case.H > 1:
        parts.append(f"head {h}")
    return f" ({', '.join(parts)})" if parts else ""


def _weights(case, out: torch.Tensor, ref: torch.Tensor, limit: float) -> list[Measured]:
    """Who sees whom, what a row that sees no key gets, the bias, the weights' sums."""
    S = _keys(case)
    Pm, Ps = _flat(out, case)[..., :S], _flat(ref, case)[..., :S]
    rest = _flat(out, case)[..., S:]
    thr = max(4 * limit, 1e-6)
    nan = torch.isnan(Pm).any(-1)  # (N, H, L)
    dead = Ps.sum(-1) == 0
    found = []
    bad_dead = dead & (nan | (Pm.abs() > thr).any(-1))
    hidden, shown = Ps == 0, Ps > thr
    live = ~dead & ~nan
    if bad_dead.any() and not (live & ((hidden & (Pm > thr)) | (shown & (Pm.abs() <= thr))).any(-1)).any():
        found.append(_dead(case, Pm, bad_dead, nan, S))  # the rows that see keys are right: the dead rows' own
    else:  # rows the spec's mask empties, given keys as the other rows are: the mask's difference, said with them
        live = live | (bad_dead & ~nan)
        if (bad_dead & nan).any():
            found.append(_dead(case, Pm, bad_dead & nan, nan, S))
    extra = hidden & (Pm > thr) & live[..., None]
    missing = shown & (Pm.abs() <= thr) & live[..., None]
    rows = (extra | missing).any(-1)
    if rows.any():
        found.append(_visibility(case, Pm, Ps, extra, missing, rows, thr))
    nan_live = nan & ~dead
    if nan_live.any():
        n = int(nan_live.sum())
        found.append(Measured("visibility", f"{n} of {int((~dead).sum())} rows that see keys are NaN (a row's first "
                                            "one: " + _row_name(case, nan_live) + ")"))
    same = live & ~rows
    other = rest.sum(-1) if rest.numel() else torch.zeros_like(Pm[..., 0])  # weight on values that are no key's
    sums = Pm.sum(-1) + other
    off_sum = same & ((sums - 1).abs() > max(thr, 10 * limit))
    if off_sum.any():
        found.append(_sums(case, sums, off_sum))
    elif (same & (Pm - Ps).abs().amax(-1).gt(2 * limit)).any() and not (other.abs() > thr).any() and not found:
        bias = _bias(case, Pm, Ps, same, thr, limit)
        if bias is not None:
            found.append(bias)
    stray = (other.abs() > thr) & ~dead
    if stray.any():
        w = other[stray]
        found.append(Measured("visibility", f"{int(stray.sum())} rows give weight ({float(w.min()):.3g}-"
                                            f"{float(w.max()):.3g}) to values that are no key of this call (e.g. "
                                            f"{_row_name(case, stray)}): a slot or page no sequence's position "
                                            "reads, or a new key's slot before it is written", pattern="stray"))
    return found


def _keys(case) -> int:
    """The key positions of an API probe (its S: the packed or gathered keys)."""
    return case.S or case.L


def _row_name(case, rows: torch.Tensor) -> str:
    n, h, i = (int(t) for t in torch.nonzero(rows)[0])
    return f"query {i}{_where(case, n, h)}"


def _dead(case, Pm, bad, nan, S) -> Measured:
    """What the rows that see no key hold, where it is not zeros."""
    rows = Pm[bad]
    kinds = []
    if nan[bad].any():
        kinds.append("NaN")
    finite = rows[~torch.isnan(rows).any(-1)]
    if len(finite) and ((finite - 1.0 / S).abs().amax(-1) < 1e-3).any():
        kinds.append(f"every key weighted alike (1/{S}: the mean of V, as a large finite number in place of -inf "
                     "gives)")
    elif len(finite):
        w = finite.sum(-1)
        kinds.append(f"weights that sum to {span(float(w.min()), float(w.max()))}")
    return Measured("dead-rows", f"{int(bad.sum())} rows that see no key hold {' or '.join(kinds)}; the spec's hold "
                                 f"zeros (e.g. {_row_name(case, bad)})")


def _map(Pm, Ps, rows, case, thr, extra=None) -> tuple[str, ...]:
    """Up to MAP_ROWS rows that differ, each as the keys the function gives weight and the spec's."""
    lines = []
    for n, h, i in torch.nonzero(rows)[:MAP_ROWS].tolist():
        mine = "".join(SHOWN if w > thr else HIDDEN for w in Pm[n, h, i].tolist())
        spec = "".join(SHOWN if w > 0 else HIDDEN for w in Ps[n, h, i].tolist())
        lines.append(f"query {i}{_where(case, n, h)}: yours {mine}")
        lines.append(f"{' ' * len(f'query {i}{_where(case, n, h)}: ')}spec  {spec}")
    return tuple(lines)


def _visibility(case, Pm, Ps, extra, missing, rows, thr) -> Measured:
    """Which keys the rows that differ see, against the spec's, and what the differences share."""
    n_rows, n_live = int(rows.sum()), int(rows.numel())
    n, h, i = torch.nonzero(rows)[0].tolist()
    mine, spec = Pm[n, h, i] > thr, Ps[n, h, i] > 0
    text = (f"query {i}{_where(case, n, h)} sees keys {spans(mine)}; the spec's sees keys {spans(spec)}"
            f" ({n_rows} of {n_live} rows differ")
    edge, pattern, rule = _edges(Pm > thr, Ps > 0, rows)
    other = _other_row(Pm > thr, Ps > 0, rows)
    if other:
        edge, pattern, rule = other, "another batch row's mask", None
    other = _other_head(Pm > thr, Ps > 0, rows)
    if other:
        edge, pattern, rule = other, "another head's mask", None
    text += f": {edge})" if edge else ")"
    return Measured("visibility", text, _map(Pm, Ps, rows, case, thr), pattern or text, rule)


def _other_row(mine: torch.Tensor, spec: torch.Tensor, rows: torch.Tensor) -> str:
    """Where every batch row that differs sees exactly what the spec's batch row 0 (or the last one) sees, and its
    own spec differs from that: the mask read from one batch row for all of them, said; else ""."""
    N = mine.shape[0]
    bad = sorted({int(n) for n in torch.nonzero(rows.any(-1).any(-1)).flatten()})
    if N < 2 or not bad:
        return ""
    for src in (0, N - 1):
        if src in bad:
            continue
        if all(torch.equal(mine[n], spec[src]) and not torch.equal(spec[n], spec[src]) for n in bad):
            rows_said = ", ".join(str(n) for n in bad)
            return (f"batch row {rows_said} sees exactly the keys the spec's batch row {src} sees: the mask (or block "
                    f"mask) of batch row {src} is read for every batch row")
    return ""


def _other_head(mine: torch.Tensor, spec: torch.Tensor, rows: torch.Tensor) -> str:
    """Where each head that differs sees exactly what the spec's head g sees (another head, the same g for every
    batch row), and its own spec differs from that: the mask of another head read for it, said head by head; else
    ""."""
    H = mine.shape[1]
    bad = sorted({int(h) for h in torch.nonzero(rows.any(-1).any(0)).flatten()})
    if H < 2 or not bad:
        return ""
    read = {}
    for h in bad:
        g = next((g for g in range(H) if g != h and torch.equal(mine[:, h], spec[:, g])
                  and not torch.equal(spec[:, h], spec[:, g])), None)
        if g is None:
            return ""
        read[h] = g
    said = ", ".join(f"head {h} sees head {g}'s" if i == 0 else f"head {h} head {g}'s"
                     for i, (h, g) in enumerate(read.items()))
    return f"a head sees exactly the keys the spec's mask of another head lets through ({said}): the mask (or block " \
           "mask) is read at another head"


def _edges(mine: torch.Tensor, spec: torch.Tensor, rows: torch.Tensor) -> tuple[str, str, dict | None]:
    """What the differing rows' seen keys share against the spec's, where each row sees one run of keys: where its
    first and its last key sit -- always at one key (0, or the last), or at one distance from the query's own
    position (i, or i + S - L, whichever holds them all) -- said beside where the spec's sit."""
    L, S = mine.shape[-2:]
    edges, kinds = {"first": [], "last": []}, set()
    for n, h, i in torch.nonzero(rows).tolist():
        ia, ib = torch.nonzero(mine[n, h, i]).flatten(), torch.nonzero(spec[n, h, i]).flatten()
        if len(ia) == 0 or len(ib) == 0:
            kinds.add("none" if len(ia) == 0 else "extra")
            continue
        if len(ia) != int(ia[-1] - ia[0]) + 1 or len(ib) != int(ib[-1] - ib[0]) + 1:
            kinds.add("gaps")
            continue
        edges["first"].append((i, int(ia[0]), int(ib[0])))
        edges["last"].append((i, int(ia[-1]), int(ib[-1])))
    said = {"none": "some rows see no key where the spec's see some", "extra": "some rows see keys where the spec's "
            "see none", "gaps": "the keys seen are not one run"}
    out = [said[k] for k in sorted(kinds) if k == "gaps" or not any(edges.values())]
    pattern = list(out)
    for name, rows_ in edges.items():
        if not rows_ or all(m == s for _, m, s in rows_):
            continue
        theirs, _ = _edge_rule([(i, s) for i, _, s in rows_], L, S)
        yours, _ = _edge_rule([(i, m) for i, m, _ in rows_], L, S)
        d = sorted({m - s for _, m, s in rows_})
        if yours and theirs:
            out.append(f"the {name} key seen is {yours}; the spec's {theirs}")
        else:
            out.append(f"the {name} key seen is {abs(d[0])} {'later' if d[0] > 0 else 'earlier'} in every row"
                       if len(d) == 1 else f"the {name} key seen moves by {d[0]} to {d[-1]}")
        bound = re.sub(r"\d+", "#", yours.split(" in ")[0]) if "key" in yours else "moves"
        pattern.append(f"{name} {d[0]:+d}" if len(d) == 1 else f"{name} {bound}")
    shifts = {name: {m - s for _, m, s in rows_} or {0} for name, rows_ in edges.items()}
    rule = ({"edges": [next(iter(shifts["first"])), next(iter(shifts["last"]))]}
            if not kinds and all(len(v) == 1 for v in shifts.values()) else None)
    return "; ".join(out), "; ".join(pattern), rule


def _edge_rule(at: list[tuple[int, int]], L: int, S: int, off: int | None = None) -> tuple[str, int | None]:
    """(where an edge sits in every row (query i, key) -- "key 0 in every row", "the last key (22) in every row",
    "at i + S - L + 2", "at i - 1" -- and the query position it is measured from, S - L or 0); ("", None) where no
    such rule holds them all. ``off``: measure from that position (the spec's, so both are said alike); else the
    one from which the edge sits nearest the query."""
    keys = {k for _, k in at}
    if len(keys) == 1 and len(at) > 1:
        k = keys.pop()
        return ("key 0 in every row" if k == 0 else f"the last key ({k}) in every row" if k == S - 1 else
                f"key {k} in every row"), off
    found = []
    for o in ((S - L, 0) if off is None else (off,)):
        d = {k - (i + o) for i, k in at}
        if len(d) == 1:
            found.append((abs(next(iter(d))), o, next(iter(d))))
    if not found:
        return "", None
    _, o, r = min(found)
    word = "i" if o == 0 else "i + S - L"
    return f"at {word}{f' + {r}' if r > 0 else f' - {-r}' if r < 0 else ''}", o


def span(lo: float, hi: float) -> str:
    """"lo to hi" (one number where they print alike), each with the digits that show how far it is from 1: sums of
    weights 1.0003 and 0.99971 are not "1-1"."""
    def fmt(x: float) -> str:
        d = abs(x - 1.0)
        digits = 4 if d == 0 or d >= 1e-3 or not math.isfinite(d) else min(12, int(-math.log10(d)) + 2)
        return f"{x:.{digits}g}"
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"


def _sums(case, sums, rows) -> Measured:
    s = sums[rows]
    return Measured("sums", f"the weights of {int(rows.sum())} rows sum to {span(float(s.min()), float(s.max()))}, "
                            f"not 1, where the keys seen are the spec's (e.g. {_row_name(case, rows)})")


def _bias(case, Pm, Ps, rows, thr, limit) -> Measured | None:
    """The function's bias against the spec's, on rows that see the same keys: its log-weights (a row's constant
    taken out: a bias is known up to one) fitted as a slope times a distance from the query, beside the spec's;
    where no form fits, the difference of the log-weights on the row that differs most."""
    both = (Pm > thr) & (Ps > thr) & rows[..., None]
    lm = torch.where(both, Pm.clamp_min(1e-300).log(), torch.nan)
    ls = torch.where(both, Ps.clamp_min(1e-300).log(), torch.nan)
    d = (lm - lm.nanmean(-1, keepdim=True)) - (ls - ls.nanmean(-1, keepdim=True))
    size = torch.nan_to_num(d.abs(), nan=0.0)
    worst = float(size.amax())
    if worst < BIAS_MIN:  # the weights differ where the keys are few and the weights small: rounding, not a bias
        return None
    n, h, i = torch.nonzero(size.amax(-1) == worst)[0].tolist()
    L, S = Pm.shape[-2], Pm.shape[-1]
    twice = _counted(d, size > BIAS_MIN)
    if twice is not None:
        return Measured("bias", twice + f" (e.g. query {i}{_where(case, n, h)}, keys {spans(_heavy(d[n, h, i]))})",
                        pattern="counted")
    yours, theirs = _distance_fit(lm[n, h], L, S), _distance_fit(ls[n, h], L, S)
    theirs = theirs or ("none" if _no_bias(ls[n, h]) else "not a slope times a distance")
    shift = None if yours else _query_shift(Pm[n, h] > thr, Ps[n, h] > thr, lm[n, h], ls[n, h],
                                            (size > BIAS_MIN).any(-1)[n, h])
    if yours:
        text = (f"the bias added to the scores{_where(case, n, h)} is {yours}; the spec's is {theirs} "
                f"(read from the log-weights with q = 0)")
    elif shift:
        text = (f"the bias added to the scores{_where(case, n, h)} at query i is the spec's at query i - {shift} "
                f"(from query {shift} on): the position a score_mod or bias is given is {shift} short of the "
                "query's own (the index inside a block of queries)")
        return Measured("bias", text, pattern="query shifted")
    else:
        text = (f"the weights differ from the spec's where the same keys are seen{_where(case, n, h)}: the "
                f"log-weights differ by up to {worst:.3g} (the spec's bias: {theirs}; yours fits no slope "
                "times a distance)")
    row = d[n, h, i]
    values = " ".join("    ." if math.isnan(x) else f"{x:+.2f}" for x in row.tolist()[:24])
    return Measured("bias", text, (f"query {i}: your log-weight minus the spec's, by key: {values}",))


def _no_bias(logw: torch.Tensor) -> bool:
    """Log-weights (L, S; NaN where not seen) that are one constant per row: no bias."""
    ok = ~torch.isnan(logw)
    return float(torch.where(ok, logw - logw.nanmean(-1, keepdim=True), 0.0).abs().max()) < 1e-3


def _query_shift(mine, spec, lm, ls, rows) -> int | None:
    """The shift t for which every row i that differs has the spec's bias of row i - t, on the keys both rows see
    (each row's constant taken out), while the rows before t do not differ; None where no t fits."""
    bad = torch.nonzero(rows).flatten().tolist()
    if not bad:
        return None
    t = bad[0]
    if t == 0 or any(i < t for i in bad):
        return None
    checked = 0
    for i in bad:
        both = mine[i] & spec[i - t]
        if int(both.sum()) < 2:  # one shared key says nothing of a bias (its constant is taken out)
            continue
        checked += 1
        a, b = lm[i][both], ls[i - t][both]
        if float(((a - a.mean()) - (b - b.mean())).abs().max()) > 1e-3 * max(1.0, float(b.abs().max())):
            return None
    return t if checked >= 3 else None


def _multiples(d: torch.Tensor) -> torch.Tensor:
    """The weights of a row's keys against the spec's, as multiples of its lightest key's (NaN where not seen)."""
    lo = torch.where(torch.isnan(d), torch.inf, d).amin(-1, keepdim=True)
    return (d - lo).exp()


def _heavy(d: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num(_multiples(d), nan=0.0) > 1.5


def _counted(d: torch.Tensor, rows_keys: torch.Tensor) -> str | None:
    """Where the rows that differ give some keys a whole multiple (2x, 3x) of the weight the spec gives them beside
    the row's other keys -- as a kernel that visits a key's block twice does -- that, said; else None."""
    rows = rows_keys.any(-1)
    m = _multiples(d[rows])
    seen = ~torch.isnan(m)
    k = m.round()
    if not seen.any() or not bool(((m - k).abs()[seen] < 0.03).all()) or float(k[seen].max()) > 4:
        return None
    heavy = seen & (k >= 2)
    if not heavy.any():
        return None
    times = sorted({int(x) for x in k[heavy].tolist()})
    said = " or ".join(f"{t}x" for t in times)
    return (f"some keys are counted more than once: in {int(rows.sum())} rows, {int(heavy.sum())} keys weigh {said} "
            f"what the spec's weights give them beside the row's other keys (log-weight + ln {times[0]} = "
            f"{math.log(times[0]):.3f}): their tile or key visited {' or '.join(str(t) for t in times)} times")


def _distance_fit(logw: torch.Tensor, L: int, S: int) -> str:
    """Log-weights (L, S; NaN where a key is not seen) as c * |i + o - j| or c * (i + o - j) up to each row's constant,
    for the places a kernel puts query i (o = S - L, or 0): the form that fits to 1e-3 ("" where none does, or the
    log-weights are flat: no bias)."""
    ok = ~torch.isnan(logw)
    y = torch.where(ok, logw - logw.nanmean(-1, keepdim=True), 0.0)
    if float(y.abs().max()) < 1e-3:
        return ""
    i = torch.arange(L, dtype=torch.float64)[:, None]
    j = torch.arange(S, dtype=torch.float64)[None, :]
    best = None
    for off, where in (((S - L, "i + S - L"), (0, "i")) if S != L else ((0, "i"),)):
        for signed in (False, True):
            x = (i + off - j) if signed else (i + off - j).abs()
            x = torch.where(ok, x, torch.nan)
            x = torch.where(ok, x - x.nanmean(-1, keepdim=True), 0.0)
            den = float((x * x).sum())
            if den == 0:
                continue
            c = float((x * y).sum()) / den
            res = float((y - c * x).abs().max())
            if res < 1e-3 * max(1.0, float(y.abs().max())) and (best is None or res < best[0]):
                form = f"({where} - j)" if signed else f"|{where} - j|"
                best = (res, f"{c:+.4g} * {form}")
    return best[1] if best else ""


def _heads(case, out: torch.Tensor, ref: torch.Tensor) -> list[Measured]:
    """Which kv head each query head reads (the one-hot its output holds), against the spec's."""
    Hkv = case.Hkv or case.H
    o, r = _flat(out, case)[..., :Hkv], _flat(ref, case)[..., :Hkv]
    mine = o.mean(-2).argmax(-1)[0].tolist()  # (H,): of batch element 0, over the rows
    spec = r.mean(-2).argmax(-1)[0].tolist()
    clean = bool(((o - torch.nn.functional.one_hot(o.argmax(-1), Hkv).double()).abs() < 1e-2).all())
    if mine == spec and clean:
        return []
    G = case.H // Hkv
    if not clean:
        return [Measured("heads", f"the query heads' outputs are not one kv head's values each (with v one-hot per kv "
                                  f"head): a query head mixes kv heads, or reads none; the spec's query head h reads "
                                  f"kv head h // {G}: {spec}")]
    modulo = [h % Hkv for h in range(case.H)]
    said = f"query heads read kv heads {mine}; the spec's {spec} (h // {G})"
    if mine == modulo:
        said += f": yours is h % {Hkv} (repeat where repeat_interleave is due)"
    h = next(h for h in range(case.H) if mine[h] != spec[h])
    return [Measured("heads", f"query head {h} reads kv head {mine[h]}; the spec's reads kv head {spec[h]}: {said}")]


def _scores(case, x, out, ref, mine, exp, limit) -> list[Measured]:
    """The score function g(s) - g(0) read from log(P_i0 / P_i1), against the spec's; the lse beside it."""
    Pm, Ps = _flat(out, case)[0, 0], _flat(ref, case)[0, 0]  # (L, S): one head, one query per raw score
    scale = 1.0 / math.sqrt(case.E) if case.scale is None else float(case.scale)
    raw = design.raw_scores(case.L, scale, design.span_of(case))
    found = []
    if torch.isnan(Pm).any() or torch.isinf(Pm).any():
        bad = ~torch.isfinite(Pm).all(-1)
        t = raw[bad] * scale
        found.append(Measured("scores", f"NaN or infinity in {int(bad.sum())} rows, those whose largest scaled score "
                                        f"is {float(t.abs().min()):.4g} or more in size (the spec's are finite): "
                                        "exp overflows where the row's max is not subtracted first"))
        return found
    from attnlab.judge.cases import DTYPES

    tiny = torch.finfo(DTYPES[case.dtype]).tiny * 2 ** 12  # weights this small are subnormal or nearly: their log
    ok = (Pm[:, 0] > tiny) & (Pm[:, 1] > tiny) & (Ps[:, 0] > tiny) & (Ps[:, 1] > tiny)  # is not a measurement
    gm = torch.where(ok, Pm[:, 0].clamp_min(1e-300).log() - Pm[:, 1].clamp_min(1e-300).log(), torch.nan)
    gs = torch.where(ok, Ps[:, 0].log() - Ps[:, 1].log(), torch.nan)
    tol = max(20 * limit / max(float(Pm[ok].min()) if ok.any() else 1.0, 1e-12), 1e-3)
    diff = (gm - gs).abs()
    if ok.any() and float(torch.nan_to_num(diff, nan=0.0).amax()) > min(tol, 0.05):
        found.append(_score_fit(raw, scale, gm, gs, ok, tol))
    return found


def _score_fit(raw, scale, gm, gs, ok, tol: float) -> Measured:
    """The function's g(x) - g(0) against the spec's: a factor where one holds, else values side by side."""
    a, b = gm[ok], gs[ok]
    factor = float((a * b).sum() / (b * b).sum()) if float((b * b).sum()) else math.nan
    pick = [int(i) for i in torch.nonzero(ok).flatten()]
    shown = pick[:: max(1, len(pick) // 6)][:7]
    table = tuple(f"raw score {float(raw[i]):+.0f} (scaled {float(raw[i]) * scale:+.3g}): yours {float(gm[i]):+.4g}, "
                  f"the spec's {float(gs[i]):+.4g}" for i in shown)
    if math.isfinite(factor) and float((a - factor * b).abs().max()) < 1e-3 * max(1.0, float(b.abs().max())):
        known = {math.sqrt(1 / scale ** 2) if scale > 0 else None: "the scale left out (1 / scale)",
                 math.log2(math.e): "log2(e): a base-2 exponent fed to exp, or log2(e) folded in twice",
                 math.log(2): "ln 2: exp2 taken of scores without log2(e) folded in",
                 scale: "the scale applied twice"}
        said = next((w for f, w in known.items() if f is not None and abs(factor - f) < 1e-3 * max(1, f)), "")
        return Measured("scores", f"the function's scores are {factor:.5g} times the spec's (log(P_i0 / P_i1) on "
                                  f"designed scores){': ' + said if said else ''}", table, f"factor {factor:.4g}",
                        {"score-factor": factor})
    capped = _tanh_form(raw * scale, gm, ok, tol)
    if capped is not None:
        spec = _tanh_form(raw * scale, gs, ok, tol)
        theirs = _capped_words(*spec) if spec else "s" if _fits(b, (raw * scale)[ok], 1e-3) else ""
        theirs = f"; the spec's {theirs}" if theirs else ""
        return Measured("scores", f"the function's score function is {_capped_words(*capped)} of the scaled score s "
                                  f"(log(P_i0 / P_i1) on designed scores){theirs}", table,
                        f"capped {_capped_words(*capped)}")
    return Measured("scores", "the function's score function differs from the spec's (log(P_i0 / P_i1) on designed "
                              "scores), and not by one factor", table)


def _fits(a: torch.Tensor, model: torch.Tensor, tol: float) -> bool:
    return float((a - model).abs().max()) < tol * max(1.0, float(a.abs().max()))


def _capped_words(A: float, C: float) -> str:
    return f"{A:.3g} * tanh(s / {C:.3g})"


def _tanh_form(s: torch.Tensor, g: torch.Tensor, ok: torch.Tensor, tol: float) -> tuple[float, float] | None:
    """(A, C) where g(s) = A * tanh(s / C) on the rows ``ok`` holds (a soft-cap, whatever its constants) to the
    probe's reading tolerance ``tol``, relative, kept within 1e-3 to 0.02: A by least squares at each C; None
    where no such form holds, or where it
    is a straight line (C far past the scores: a factor, said as one). C is searched on its log, 1e-2 to 1e4, by the
    probes' one search (:func:`attnlab.judge.probes.fitted.search`)."""
    s, g = s[ok], g[ok]
    if len(s) < 4 or float(s.abs().max()) == 0:
        return None

    def err(C: float) -> tuple[float, float]:
        t = torch.tanh(s / C)
        A = float((t * g).sum() / (t * t).sum())
        return float((g - A * t).abs().max()), A

    from .fitted import search

    log_c = search(lambda x: err(math.exp(x))[0], [math.log(10.0) * (i / 20 - 2) for i in range(121)], 40)
    if log_c is None:  # (C at 1e-2 or 1e4, the grid's ends: no soft-cap's constant inside it)
        return None
    C = math.exp(log_c)
    e, A = err(C)
    if e >= min(max(tol, 1e-3), 0.02) * max(1.0, float(g.abs().max())) or 20 * float(s.abs().max()) < C:
        return None
    return A, C


def _backward(case, out, dv, dv_ref, limit) -> list[Measured]:
    """The weights the backward uses (dV = Pᵀ dO with dO one-hot per query: dV[j, i] = P_ij) against the forward's
    own and the spec's."""
    S = case.S or case.L
    Pb = _flat(dv, case)[..., :S, :case.L].transpose(-2, -1)  # (N, H, L, S)
    Pf = _flat(out, case)[..., :S]
    Ps = _flat(dv_ref, case)[..., :S, :case.L].transpose(-2, -1)
    thr = max(4 * limit, 1e-6)
    seen_b, seen_f, seen_s = Pb.abs() > thr, Pf > thr, Ps > 0
    rows = (seen_b != seen_s).any(-1)
    if rows.any() and bool((seen_b == seen_f).all()):  # the forward's own difference, said there: nothing of its own
        return []
    if rows.any():
        n, h, i = torch.nonzero(rows)[0].tolist()
        same_fwd = bool((seen_b == seen_f).all())
        return [Measured("backward", f"the backward's weights (read from dV with dO one-hot per query) see other keys "
                                     f"than the spec's: query {i} keys {spans(seen_b[n, h, i])}, the spec's "
                                     f"{spans(seen_s[n, h, i])}" + ("" if same_fwd else
                                                                     f"; the forward's {spans(seen_f[n, h, i])}"),
                         _map(Pb, Ps, rows, case, thr))]
    if (Pb - Ps).abs().amax() > 10 * thr:
        ratio = (Pb.sum(-1) / Ps.sum(-1).clamp_min(1e-300))[seen_s.any(-1)]
        return [Measured("backward", f"the backward's weights (read from dV with dO one-hot per query) see the right "
                                     f"keys but differ in value: each row sums to {float(ratio.min()):.4g}-"
                                     f"{float(ratio.max()):.4g} of the spec's{_backward_bias(Pb, Ps, seen_s)}")]
    return []


def _backward_bias(Pb: torch.Tensor, Ps: torch.Tensor, seen: torch.Tensor) -> str:
    """Where the backward's weights are a slope times a distance from the query other than the spec's (fitted on
    their logs, a row's constant taken out, as the forward's bias is read), that form beside the spec's; else ""."""
    if bool((Pb[seen] <= 0).any()):
        return ""
    n, h = (int(t) for t in torch.nonzero((Pb - Ps).abs().amax(-1) == (Pb - Ps).abs().amax())[0][:2])
    L, S = Pb.shape[-2:]
    lb = torch.where(seen[n, h], Pb[n, h].clamp_min(1e-300).log(), torch.nan)
    ls = torch.where(seen[n, h], Ps[n, h].clamp_min(1e-300).log(), torch.nan)
    yours, theirs = _distance_fit(lb, L, S), _distance_fit(ls, L, S)
    if not yours or yours == theirs:
        return ""
    return f": their bias is {yours}; the spec's {theirs or 'none'}"
