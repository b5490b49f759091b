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
from attnlab.judge import hint as H
from attnlab.judge.cases import Case
from attnlab.judge.facts import Cause

_RULE = ("w_ij = exp(s_ij) / (Σ_j exp(s_ij) + exp(sinks[h])) for query head h, the sink's own weight dropped")
_GRAD = "d sinks[h] = -Σ over b and i of P_sink,i (dO_i · O_i) over head h's rows, P_sink,i = exp(sinks[h] - lse_i)"
_S = ("sinks",)
CAUSES = (
    Cause('sinks', 'only cases with sinks fail: ' + _RULE + '; a row that sees no key gives the sink all its weight '
                   '(output 0, lse the sink)', tags=_S),
    Cause('sink-ignored', 'the sinks are ignored: the output is attention without them (a sink left out of the '
                          "softmax's sum leaves it out whatever the max): " + _RULE),
    Cause('sink-head', "one head's sink is used for every head (sinks[0], or the last): " + _RULE),
    Cause('sink-kv-head', 'the sink is read by the kv head (sinks[h // G], or h % Hkv): the sinks are one per query '
                          'head, ' + _RULE),
    Cause('sink-query', "the sink is read by the query's position (sinks[i % H] for row i), not by its head: "
                        + _RULE),
    Cause('sink-per-tile', 'the sink is added to the sum once per key tile (its weight counted T times: the sink '
                           "plus ln T): fold it into each row's sum once, after its last tile"),
    Cause('sink-scaled', "the sink is scaled as a score is (by the softmax scale, or by ln 2 or log2(e) in a kernel "
                         "that works in exp2): the sink enters each row's softmax raw, " + _RULE),
    Cause('sink-masked', "the sink goes through the mask as a key would (a column before the first key or after "
                         "the last, under the causal mask or the window), so some rows lose it: every row sees its "
                         "sink, " + _RULE),
    Cause('sink-modified', "the score modifier (soft-cap, ALiBi's bias) is applied to the sink as to a key's score "
                           "(the sink as the column after the last key): the sink enters raw, " + _RULE),
    Cause('sink-unshifted', "the sink's exp is not shifted by the row max that the keys' are (exp(sink) beside "
                            "exp(s_ij - m_i)): its weight is exp(m_i) times too large; use exp(sinks[h] - m_i), with "
                            "the sink in the max, " + _RULE),
    Cause('sink-column-shifted', "the sink's column is put first but the last column is dropped: the sink's weight "
                                 "multiplies v_0 and key j's v_(j+1); drop the sink's own column, " + _RULE),
    Cause('sink-backward', "the backward leaves the sink out of the weights it recomputes (P from the keys' "
                           "log-sum-exp alone, each row summing to 1): the forward is right, dq, dk, dv are not; "
                           "P_ij = exp(s_ij - lse_i) with lse_i = log(Σ_j exp(s_ij) + exp(sinks[h]))"),
    Cause('sink-not-in-lse', 'the log-sum-exp leaves the sink out: lse_i = log(Σ_j exp(s_ij) + exp(sinks[h])), and a '
                             'row that sees no key has lse = sinks[h]'),
    Cause('dsink-zero', 'the sinks get no gradient (zero, or none reaches them): ' + _GRAD),
    Cause('dsink-sign', "the sinks' gradient has the wrong sign: " + _GRAD),
    Cause('dsink-form', "the sinks' gradient leaves a factor out (P_sink,i, or D_i = dO_i · O_i): " + _GRAD),
    Cause('dsink-axis', "the sinks' gradient is reduced over the wrong axes (one batch element, the heads of a kv "
                        'group, every head, or a mean): ' + _GRAD),
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


def _scaled(by):
    """Each row's sink times ``by`` (a number, or a function of the question: its softmax scale)."""
    def change(kw):
        c = by(kw) if callable(by) else by
        return {**kw, "sinks": _rows(kw) * c}
    return change


def _softmax_scale(kw: dict) -> float:
    sc = kw.get("scale")
    return 1.0 / math.sqrt(kw["query"].shape[-1]) if sc is None else float(sc)


def _unshifted(kw: dict) -> dict:
    """Each row's sink plus its max score m_i (exp(sink) beside exp(s - m_i)): the max read off the oracle's
    forward without sinks, m_i = lse_i + log(max_j P_ij); -inf (the sink's weight none) where a row sees no key."""
    f = oracle.forward(kw["query"], kw["key"], kw["value"], kw.get("attn_mask"), kw.get("is_causal", False),
                       kw.get("scale"), kw.get("enable_gqa", False), score_mod=kw.get("score_mod"))
    m = f.lse + f.P.amax(-1).log()
    return {**kw, "sinks": _rows(kw) + m}


def _extra_key_seen(case: Case, where: str) -> torch.Tensor | None:
    """(1 or N, 1, L) bool: whether a key placed ``where`` ("before" the first key, at position -1; "after" the
    last, at S) is seen by each row under the case's causal mask or window, each sequence its own; None where the
    case masks no position (or by a mask that says nothing of positions past its keys)."""
    from attnlab.judge import apis
    from attnlab.judge.apis import flash

    def seen(L, S, offset, causal, window):
        if where == "before":
            b = flash.keys_seen_at(L, S + 1, offset + 1, causal, window)
            return None if b is None else b[:, 0]
        b = flash.keys_seen_at(L, S + 1, offset, causal, window)
        return None if b is None else b[:, S]

    L, S = case.L, case.S or case.L
    if not case.api:
        if not case.is_causal or case.mask is not None or where == "before":
            return None
        return (torch.arange(L) >= S).view(1, 1, L)  # SDPA's causal mask is upper-left: key S is seen from row S on
    name, args = apis.parse(case.api)
    causal, window = bool(args.get("causal")), tuple(args.get("window", (-1, -1)))
    if not causal and window == (-1, -1):
        return None
    if name == "flash-attn":
        r = seen(L, S, S - L, causal, window)
        return None if r is None else r.view(1, 1, L)
    if name == "flash-attn-varlen":
        from attnlab.judge.apis import varlen

        out = torch.ones(sum(varlen.lengths(case, args)[0]), dtype=torch.bool)
        for p in varlen.placements(case, args):
            r = seen(p.L, p.S, p.offset, causal, window)
            if r is not None:
                out[p.q0:p.q0 + p.L] = r
        return out.view(1, 1, -1)
    if name == "paged-decode":
        from attnlab.judge.apis import paged

        rows = []
        for n in paged.totals(case, args):
            r = seen(L, n, n - L, causal, window)
            rows.append(torch.ones(L, dtype=torch.bool) if r is None else r)
        return torch.stack(rows).view(len(rows), 1, L)
    return None


def _masked(seen: torch.Tensor):
    def change(kw):
        s = _rows(kw)
        return {**kw, "sinks": s.masked_fill(~seen.expand(max(s.shape[0], seen.shape[0]), *s.shape[1:]), -math.inf)}
    return change


def _modified(pos: str):
    """Each row's sink as the score modifier leaves a key's score at the column ``pos`` ("after": S, the column a
    sink appended to the scores takes)."""
    def change(kw):
        mod = kw.get("score_mod")
        if mod is None:
            raise ValueError("no modifier to apply to the sink")
        s = _rows(kw)
        N, H, L = kw["query"].reshape(-1, *kw["query"].shape[-3:]).shape[:3]
        S = kw["key"].shape[-2]
        b, h, i = (torch.arange(n).view(*(n if d == k else 1 for d in range(3))) for k, n in enumerate((N, H, L)))
        got = mod(s.expand(N, H, L).double(), b, h, i, torch.tensor(S if pos == "after" else -1))
        return {**kw, "sinks": got.expand(N, H, L)}
    return change


def _column_shifted(case: Case, x) -> torch.Tensor:
    """The output with the sink's column first and the last column dropped: the sink's weight on v_0, key j's on
    v_(j+1), the last key's lost."""
    q, k, v = (t.detach().double().cpu() for t in (x.q, x.k, x.v))
    f = oracle.forward(q, k, v, oracle.cpu64(x.dense), case.is_causal, case.scale, case.gqa,
                       sinks=x.sinks.detach().double().cpu())
    W = torch.cat([f.sink_P[..., None], f.P[..., :-1]], dim=-1)
    return oracle.unflatten(W @ f.v, f)


def alternatives(case: Case, x=None):
    """The wrong readings of a sink case's sinks, as changes of the oracle's arguments (each a variant of its key);
    with the case's inputs ``x``, the readings that are answers of their own (the sink's column taken for a key's)."""
    A = explain.Alternative
    if not case.sinks:  # a kernel that appends a sink column of -inf when none is given, then modifies every column:
        if case.mod and case.api:  # the soft-cap turns -inf into -softcap, a sink where there is none
            yield A("sink-modified", lambda kw: _modified("after")(
                {**kw, "sinks": torch.full((kw["query"].shape[-3],), -math.inf, dtype=torch.float64)}))
        return
    H, Hkv, L, S = case.H, case.Hkv or case.H, case.L, case.S or case.L
    G = H // Hkv
    yield A("sink-ignored", lambda kw: {**kw, "sinks": None})
    yield A("sink-scaled", _scaled(_softmax_scale))
    for c in (math.log(2), 1 / math.log(2)):
        yield A("sink-scaled", _scaled(c))
    yield A("sink-unshifted", _unshifted)
    for where in ("before", "after"):
        seen = _extra_key_seen(case, where)
        if seen is not None and not bool(seen.all()):
            yield A("sink-masked", _masked(seen))
    if case.mod:
        yield A("sink-modified", _modified("after"))
    if x is not None and not case.mod and x.sinks is not None:
        yield A("sink-column-shifted", out=_column_shifted(case, x))
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


def gradient_readings(P: torch.Tensor, D: torch.Tensor, groups: int, sinks: torch.Tensor | None = None):
    """(key, d sinks (H,)) of each wrong reading of the sinks' gradient, from each row's sink weight ``P`` and
    ``D`` (N, H, L) (and each row's sink, ``sinks``): zero; the sign flipped; a factor left out, or P_sink recomputed
    with the sink in exp2's units unconverted; reduced over other axes (the last block of query rows alone: a sum
    assigned in a loop over them, not added)."""
    N, H, L = P.shape
    right = -(P * D).sum(dim=(0, 2))
    yield "dsink-zero", torch.zeros_like(right)
    yield "dsink-sign", -right
    yield "dsink-form", -P.sum(dim=(0, 2))
    yield "dsink-form", -D.sum(dim=(0, 2))
    yield "dsink-form", -(P * (1 - P) * D).sum(dim=(0, 2))
    if sinks is not None:  # exp2(sink - lse * log2 e) = exp(sink ln 2 - lse): P_sink times exp(sink (ln 2 - 1))
        yield "dsink-form", -(P * torch.exp(sinks * (math.log(2) - 1)) * D).sum(dim=(0, 2))
    for b in BLOCKS:  # the last block of query rows alone, of every batch element or of the last one (where one
        # block holds every row the first is the right answer: a passing case refutes no block size it cannot tell)
        yield "dsink-axis", -(P * D)[..., (L - 1) // b * b:].sum(dim=(0, 2))
        if N > 1:
            yield "dsink-axis", -(P * D)[-1:, :, (L - 1) // b * b:].sum(dim=(0, 2))
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
    if case.dtype not in ("float32", "float64"):  # a half dtype's d sinks is too coarse to tell the readings apart
        return []
    i = names.index("dsinks")
    ref = exp.ref[i]
    got = mine[i] if i < len(mine) and mine[i] is not None else torch.zeros_like(ref)
    got = got.detach().double().cpu().reshape(ref.shape)
    P, D = _parts(exp.fwd, x.grad_out)
    found = [key for key, alt in gradient_readings(P, D, exp.fwd.groups, exp.fwd.sinks)
             if float((got - alt).abs().max()) <= comp.allowed and float((alt - ref).abs().max()) > 2 * comp.allowed]
    return [H.tie(dict.fromkeys(found))] if found else []


def backward_hints(case: Case, x, mine: tuple, exp, comps) -> list[str]:
    """Where the output is right and dv is not: ``sink-backward`` when the function's dv is the one a backward gets
    from weights recomputed without the sink (P_ij / (1 - P_sink,i): each row summing to 1), to within dv's limit,
    and that answer at least twice the limit from the right one."""
    from attnlab.judge.judge import quantities

    names = quantities(case)
    comp = next((c for c in comps if c.quantity == "dv"), None)
    f = exp.fwd
    if comp is None or comp.passed or "dv" not in names or f is None or f.sink_P is None or exp.keep is not None:
        return []
    i = names.index("dv")
    if i >= len(mine) or not isinstance(mine[i], torch.Tensor):
        return []
    ref = exp.ref[i]
    dO = x.grad_out.detach().double().cpu().reshape(f.out.shape)
    keys = f.P / (1 - f.sink_P).clamp_min(1e-300)[..., None]
    dv = keys.transpose(-2, -1) @ dO  # (N, H, S, Ev): the G query heads of a group add into their key head
    dv = dv.reshape(dv.shape[0], -1, f.groups, *dv.shape[2:]).sum(2)
    if dv.numel() != ref.numel():
        return []
    alt = dv.reshape(ref.shape)
    got = mine[i].detach().double().cpu().reshape(ref.shape)
    if float((got - alt).abs().max()) <= comp.allowed and float((alt - ref).abs().max()) > 2 * comp.allowed:
        return ["sink-backward"]
    return []


DROPS_THE_SINK = ("sink-ignored", "sink-masked", "sink-per-tile")  # readings whose rows may lose the sink entirely
MOVES_THE_SINK = (*DROPS_THE_SINK, "sink-scaled", "sink-modified", "sink-head", "sink-kv-head", "sink-query",
                  "sink-unshifted")  # readings of another logit: a row that sees no key has that logit as its lse


def lse_explained(hints: list[str]) -> list[str]:
    """A case's hints without the log-sum-exp's sink readings where an output reading already says them: a sink
    ignored (or masked, or added once per key tile a row visits: none for a row that sees no key) leaves it out of
    the lse as well, on every row or on the rows that see no key; a sink read as another logit is that logit in the
    lse of a row that sees no key."""
    said = {k for h in hints for k in H.readings(h)}
    drop = {"sink-not-in-lse", "lse-dead-rows"} if said & set(DROPS_THE_SINK) else {"lse-dead-rows"} if (
        said & set(MOVES_THE_SINK)) else set()
    return [h for h in hints if h not in drop]


def tight_readings(case: Case, x, out, exp, limit: float) -> list[str]:
    """The sink readings whose answer the function's output is to within the case's own limit, where that answer is
    more than twice the limit from the right one: a reading held without the rounding noise of a wider dtype that
    the judge's row-by-row reading allows for (a float64 case whose sink moves the answer by float32's size is that
    reading, not float32 arithmetic)."""
    if not case.sinks or not isinstance(out, torch.Tensor) or not math.isfinite(limit) or exp.keep is not None:
        return []
    if case.api:
        from attnlab.judge import apis

        base = apis._questions(case, x, exp)[0]
    else:
        base = dict(query=x.q.detach().double().cpu(), key=x.k.detach().double().cpu(),
                    value=x.v.detach().double().cpu(), attn_mask=oracle.cpu64(x.dense), is_causal=case.is_causal,
                    scale=case.scale, enable_gqa=case.gqa, score_mod=exp.fresh(torch.float64, "cpu")[0],
                    sinks=x.sinks)
    ref = exp.ref[0]
    got = out.detach().double().cpu()
    if got.numel() != ref.numel() or not bool(torch.isfinite(got).all()):
        return []
    got = got.reshape(ref.shape)
    found = []
    for a in alternatives(case, x):
        try:
            alt = a.out if a.change is None else explain.answer(a.change(dict(base)))[0]
        except (TypeError, ValueError, RuntimeError, IndexError, KeyError):
            continue
        if alt.numel() != ref.numel():
            continue
        alt = alt.reshape(ref.shape)
        if float((got - alt).abs().max()) <= limit and float((alt - ref).abs().max()) > 2 * limit:
            found.append(a.key)
    found = list(dict.fromkeys(found))
    return [H.tie(found)] if found else []


def said_of_the_sink(hints: list[str]) -> bool:
    """Whether a row's hints name a reading of the sink (its output's error is that reading's, not a rounding)."""
    keys = {c.key for c in CAUSES} - {"sinks"}
    return any(k in keys for h in hints for k in H.readings(h))


def overflows(case: Case, mine: tuple, exp) -> bool:
    """A case whose sinks sit far above the scores (``huge``: exp(sink - the row's max score) is past float32's range)
    where the function's forward -- its output or its log-sum-exp -- is inf or NaN and the spec's is finite: the max
    a kernel subtracts before exp leaves the sink out (or none is subtracted). Gradients alone say nothing here: a
    backward wrong for a reason of its own overflows there too."""
    if case.sinks != "huge" or mine is None:
        return False
    forward = [(mine[0], exp.ref[0])] + ([(mine[-1], exp.ref[-1])] if case.api else [])  # (an API's lse is last)
    for got, ref in forward:
        if isinstance(got, torch.Tensor) and isinstance(ref, torch.Tensor) and got.numel() == ref.numel():
            g = got.detach().double().cpu().reshape(ref.shape)
            if bool((~torch.isfinite(g) & torch.isfinite(ref)).any()):
                return True
    return False


def keys_lse(f: oracle.Forward) -> torch.Tensor:
    """Each row's log-sum-exp over its keys alone (N, H, L): the sink left out (-inf where a row sees no key)."""
    return f.lse + f.P.sum(-1).log()


def lse_hints(mine, ref: torch.Tensor, f: oracle.Forward, rows: torch.Tensor | None = None) -> list[str]:
    """A sink case's failing log-sum-exp, read on ``rows`` (those whose output is right; None: every row): the
    keys' alone (``sink-not-in-lse``), or right on every row that sees a key and wrong on the rows that see none
    (``lse-dead-rows``: -inf or NaN where the sink is the answer)."""
    if rows is not None:
        if rows.numel() != ref.numel() or not bool(rows.any()):
            return []
        keep = rows.reshape(ref.shape)
    else:
        keep = torch.ones_like(ref, dtype=torch.bool)
    if not isinstance(mine, torch.Tensor) or mine.numel() != ref.numel():
        return []
    m = mine.detach().double().cpu().reshape(ref.shape)
    if lse_without_sink(m, ref, f, keep):
        return ["sink-not-in-lse"]
    keyed = f.P.sum(-1).reshape(ref.shape) > 0
    near = 1e-2 * (1 + ref.abs())
    right = ((m - ref).abs() <= near) | ~keep
    if bool(right[keyed].all()) and bool((~keyed & keep).any()) and not bool(right[~keyed].all()):
        return ["lse-dead-rows"]
    return []


def lse_without_sink(mine, ref: torch.Tensor, f: oracle.Forward | None, keep: torch.Tensor | None = None) -> bool:
    """Whether a failing log-sum-exp is the keys' alone, the sink left out: on every row that sees a key within a
    coarse 1e-2 of it (these say which formula, not how well), infinite or NaN where a row sees none, and that reading
    not the right one. ``keep``: the rows read (elsewhere the output has causes of its own); None: every row."""
    if f is None or f.sinks is None or not isinstance(mine, torch.Tensor) or mine.numel() != ref.numel():
        return False
    m = mine.detach().double().cpu().reshape(ref.shape)
    alt = keys_lse(f).reshape(ref.shape)
    seen = f.P.sum(-1).reshape(ref.shape) > 0
    keep = torch.ones_like(seen) if keep is None else keep.reshape(ref.shape)
    keyed, keyless = seen & keep, ~seen & keep
    near = 1e-2 * (1 + ref.abs())
    if not bool(((m - alt).abs() <= near)[keyed].all()) or bool(torch.isfinite(m[keyless]).any()):
        return False
    return bool(((alt - ref).abs() > near)[keyed].any()) or bool(keyless.any())


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
            alts = [alt for k, alt in gradient_readings(P, D, f.groups, f.sinks) if k == key]
            if alts and all(float((alt - ref[-1]).abs().max()) > far for alt in alts):
                gone.add(key)
    return gone
