"""No line without its check: a cause named from some failing rows must leave the function's passing rows passing.

A failing row is named by the wrong semantics its output matched (:mod:`attnlab.judge.explain`). That reading
is local: the same numbers may be matched by a bug the function does not have, which would have failed cases the
function passed. So before a line is said, each named cause is held to every case the function *passed* (the
probes first, whose designed inputs make the difference large where there is one): where each reading of the
cause (its variants: tile widths, edges, alignments) would have failed that case -- its answer there is further
from the right one than four times the case's limit -- and the function passed it, the function does not do
that, and the cause is refuted: its line is not said. What the rows measured is still said (the probes' facts,
the cases' shared tags), never the refuted name.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.judge import apis, explain, hypotheses, oracle
from attnlab.judge import hint as H
from attnlab.judge.cases import Case

MARGIN = 4.0  # a cause predicts a failure where its answer is this many limits from the right one
OUTWEIGH = 4  # a cause named on more than this many failing cases per passing case that refutes it is kept: at a
# packing's or a page's end a reading has variants the judge's alternative does not spell alike, and one passing
# case there says less than two dozen failing ones
MAX_CASES = 120  # passing cases a cause is held to (probes first), to bound the time a failing function costs


def _scope(key: str) -> set[str]:
    """The case tags a cause's claim is about: its line's scope where the table gives one (is_causal with a mask, of
    any kind), else every API argument a case exercises."""
    from attnlab.judge import causes

    line = causes.table().get(causes.line_of(key))
    return set(line.scope) if line is not None and line.scope else ARGUMENTS


def support(rows) -> dict[str, int]:
    """Per semantic hint key: the failing cases (by name, any dtype) whose rows name it."""
    cases: dict[str, set] = {}
    for r in rows:
        if r.status == "fail":
            for h in r.hints:
                for k in h.keys:
                    cases.setdefault(k, set()).add(r.case)
    return {k: len(v) for k, v in cases.items()}


def named(rows) -> dict[str, set[frozenset]]:
    """The semantic hint keys the failing rows name (not a rounding, not a supporting hint, a tie's readings each),
    each with the :data:`ARGUMENTS` each of its rows' cases exercises."""
    from attnlab.judge.precision import rounding

    out: dict[str, set[str]] = {}
    for r in rows:
        if r.status != "fail":
            continue
        for h in r.hints:
            if h.supporting or h.has_variant or h.measured:
                continue
            for k in h.keys:
                if k in UNCHECKED or k in ("eps-in-sum", "lse-half"):
                    continue
                sig = set(r.tags) & _scope(k)
                if rounding(k):  # a rounding is held to the passing cases of its own dtype
                    sig.add(r.dtype)
                out.setdefault(k, set()).add(frozenset(sig))
    return out


# keys no alternative computes (read from the output's shape, not from another question): nothing to hold them to
UNCHECKED = {"max-subtraction", "dead-rows", "backward-mask", "dropout-renormalised", "softmax-dim",
             "varlen-lse-padded", "lse-base2", "lse-unscaled", "lse-shift", "lse-dead-rows"}


# The arguments a case exercises, as its tags: a cause named on a case is held to the passing cases that exercise the
# same ones (its reading on other arguments -- a causal alignment read on a window -- is another claim, made of
# another variant of the cause, not the one its failing cases matched).
ARGUMENTS = {"causal", "lower-right", "upper-left L!=S", "window-left", "window-right", "alibi", "softcap", "append",
             "gqa", "bool-mask", "float-mask", "broadcast-mask", "mask-fn", "causal+mask", "scale", "scale-tensor",
             "mod", "dropout", "grad-mask", "dead-rows", "sinks"}
# causes read through a family of variants (a tile width, an edge's side, an alignment of the mask or of ALiBi's
# distance, where a packing or a page ends): a case where the function's own variant changes nothing is one where
# the judge yields only the others, which differ -- no passing case can tell those apart, so none refutes them
FAMILIES = ("tail-dropped", "pad-keys", "flash-window-edge", "mod-after-mask", "flex-block-size",
            "online-not-rescaled", "api-top-left", "varlen-", "paged-", "sink-per-tile")
# causes that claim something of every call (the mask left out, the scale): any passing case can refute them
GLOBAL = {"api-mask-ignored", "mask-ignored", "causal-ignored", "unscaled", "scale-1/d", "varlen-packing-ignored",
          "paged-table-ignored", "paged-seqlens-ignored"}


def refuted(keys: set[str], passing: list[tuple[Case, float]], seed: int, inputs: Callable,
            exercised: dict[str, set[frozenset]] | None = None, support: dict[str, int] | None = None) -> set[str]:
    """The keys among ``keys`` that some passing case refutes: ``passing`` (case, its output's limit), ``inputs(case,
    seed)`` the case's tensors (verify's), ``exercised``: per key, the :data:`ARGUMENTS` of each failing case that
    named it (a passing case refutes a key only where it exercises the same ones as one of them; any passing case
    refutes a :data:`GLOBAL` one)."""
    contra: dict[str, int] = {}
    exercised = exercised or {}
    out: set[str] = set()
    for case, limit in _order(passing)[:MAX_CASES]:
        if case.dropout_p > 0 or not math.isfinite(limit) or limit <= 0:
            continue
        left = {k for k in keys - out if not k.startswith(FAMILIES) and (
            k in GLOBAL or k not in exercised or frozenset(set(case.tags) & _scope(k)) in exercised[k]
            or frozenset(set(case.tags) & _scope(k)) | {case.dtype} in exercised[k])}
        if not left:
            continue
        try:
            for k in _refuted_by(case, limit, left, case.seed(seed), inputs):
                contra[k] = contra.get(k, 0) + 1
        except (TypeError, ValueError, RuntimeError, IndexError, KeyError):  # a case the alternatives cannot take
            continue
        out = {k for k, n in contra.items() if n * OUTWEIGH >= (support or {}).get(k, 0)}
    return out


def without(r, gone: set):
    """A row with the readings ``gone`` taken out of its hints (a tie keeps the rest), kept in its ``refuted``."""
    if not gone or not r.hints:
        return r
    from dataclasses import replace

    kept, dropped = [], []
    for h in r.hints:
        out = [k for k in h.keys if H.base(k) not in gone and not any(p in gone for p in k.split("+"))]
        dropped += [k for k in h.keys if k not in out]
        if out:
            kept.append(H.Hint(tuple(out), h.supporting))
    return replace(r, hints=kept, refuted=sorted(set(dropped))) if dropped else r


COVER = 0.5  # a reading must fit at least this share of the failing cases it would change, or it fits by chance
MAX_FAILING = 40  # failing cases a reading is held to, at most (the smallest first)


def uncovered(keys: dict[str, set[frozenset]], failing: list, seed: int, inputs: Callable) -> set[str]:
    """The keys whose reading fits few of the failing cases it would change: ``failing`` (case, its output's limit,
    its row's hints, each hint's keys a frozenset). Where a reading's answer differs from the right one on a failing
    case (by MARGIN times its limit), the function's failing there is the reading's to explain; a reading that
    explains under COVER of those cases fits its few by chance (the first token of each packed sequence given to the
    one before is not every sequence read max_seqlen_k long, though on one case it reads alike). A case a second
    bug's reading names, or one a kept reading changes too (two bugs at once answer as neither alone), says nothing
    of a reading: :func:`_settled` weighs them, the best named reading first; readings tied in one hint are one
    finding, not two (:func:`_apart`)."""
    if not keys:
        return set()
    seen = []  # (the keys a failing case is named by, the keys whose reading changes it)
    together: dict[frozenset, int] = {}
    for case, limit, hints in sorted(failing, key=lambda f: f[0].work)[:MAX_FAILING]:
        if case.dropout_p > 0 or not math.isfinite(limit) or limit <= 0:
            continue
        try:
            changed = _changes(case, limit, set(keys), case.seed(seed), inputs)
        except (TypeError, ValueError, RuntimeError, IndexError, KeyError):
            continue
        seen.append((frozenset().union(*hints), changed))
        for a, b in _apart(hints, set(keys)):
            together[frozenset((a, b))] = together.get(frozenset((a, b)), 0) + 1
    out = _settled(seen, set(keys), together)
    return out | _shadows([hints for _, _, hints in failing], set(keys) - out)


FULL = ("float32", "float64")  # the dtypes a semantic reading is read in without a half dtype's wide rule


def blurred(rows) -> set[str]:
    """The semantic keys named only in a half dtype's rows, on cases whose float32 or float64 row failed too and
    names them nowhere: a semantics does not change with the dtype, and there, held to a finer rule, it did not
    answer as the function did; only the half dtype's wide rule let it fit."""
    from attnlab.judge.precision import rounding

    named: dict[str, set] = {}  # key -> the (case, dtype) rows that name it
    failed: dict[str, set] = {}  # case -> the full-precision dtypes it failed in
    for r in rows:
        if r.status != "fail":
            continue
        if r.dtype in FULL:
            failed.setdefault(r.case, set()).add(r.dtype)
        for h in r.hints:
            if not h.supporting and not h.measured:
                for k in h.keys:
                    named.setdefault(k, set()).add((r.case, r.dtype))
    return {k for k, where in named.items() if not rounding(k) and all(
        dt not in FULL and failed.get(case) for case, dt in where)}


def _shadows(rows: list[list[frozenset]], keys: set[str]) -> set[str]:
    """The readings tied, in every hint of every failing row they are named in (``rows``: each row's hints), with
    one reading named on more failing rows: where the two answer alike the other answers more, and nothing shows
    this one apart (a causal loop that skips key tiles from the tile's first query drops a partial last tile on
    short keys -- and more on long ones)."""
    tied: dict[str, set[str]] = {}  # per key: the keys in every hint it is named in
    support = dict.fromkeys(keys, 0)
    for hints in rows:
        for k in frozenset().union(*hints) & keys:
            support[k] += 1
        for h in hints:
            for k in h & keys:
                tied[k] = set(h - {k}) if k not in tied else tied[k] & h
    return {k for k in keys if support[k] and any(support.get(o, 0) > support[k] for o in tied.get(k, ()))}


def _settled(seen: list, keys: set[str], together: dict) -> set[str]:
    """:func:`uncovered`'s reckoning, reading by reading, the best named first: each counts the failing cases it
    changes and the share of them it fits, leaving out a case another reading not found out names (a second bug's
    case), one a reading already kept changes too (both bugs at once answer as neither alone), and one a reading
    named beside it in two rows changes -- where each of the two is also named alone somewhere (a second bug shows
    by itself; a reading seen only beside another, a packing's boundary read two ways, is that one's shadow). A
    reading under COVER is out, and excuses nothing after."""
    alone = {k for named, _ in seen for k in named & keys if not (named & keys) - {k}}  # a finding of its own
    support = {k: sum(k in named for named, _ in seen) for k in keys}
    kept: set[str] = set()
    out: set[str] = set()
    for k in sorted(keys, key=lambda key: (-support[key], key)):
        applies = fits = 0
        for named, changed in seen:
            if k not in changed:
                continue
            if k not in named and (named & (keys - out) - {k} or changed & kept - {k} or any(
                    {k, o} <= alone and together.get(frozenset((k, o)), 0) >= 2 for o in changed - out - {k})):
                continue  # a second bug's case, or both bugs' at once: it says nothing of this reading
            applies += 1
            fits += k in named
        (out if applies >= 2 and fits < COVER * applies else kept).add(k)
    return out


def _apart(hints: list[frozenset], keys: set[str]) -> set[tuple[str, str]]:
    """The pairs of ``keys`` a row names in two of its hints: two findings, as two bugs give. Two readings of one tie
    are one finding that either explains (four misreadings of cu_seqlens answer one case alike), not two bugs."""
    pairs = set()
    for i, a in enumerate(hints):
        for b in hints[i + 1:]:
            pairs |= {tuple(sorted((x, y))) for x in a & keys for y in b & keys if x != y and not {x, y} <= a & b}
    return pairs


def _changes(case: Case, limit: float, keys: set[str], seed: int, inputs: Callable) -> set[str]:
    """The keys among ``keys`` one of whose readings answers this case otherwise than the spec does."""
    x = inputs(case, seed)
    base, alts = _questions(case, x, seed)
    ref = oracle.answer(**base)[0]
    out = set()
    for a in alts:
        key = apis._unnumbered(a.key)
        if key not in keys or key in out:
            continue
        try:
            alt = a.out if a.change is None else explain.answer(a.change(dict(base)))[0]
        except (TypeError, ValueError, RuntimeError, IndexError, KeyError):
            continue
        if alt is not None and alt.shape == ref.shape and \
                float(torch.nan_to_num((alt - ref).abs(), nan=math.inf).amax()) > MARGIN * limit:
            out.add(key)
    return out


def _order(passing):
    """The probes first (their designed inputs show a difference most plainly), then the rest."""
    return sorted(passing, key=lambda cl: (cl[0].probe is None, cl[0].work))


def _refuted_by(case: Case, limit: float, keys: set[str], seed: int, inputs: Callable) -> set[str]:
    from attnlab.judge import precision, rule
    from attnlab.judge.cases import DTYPES

    x = inputs(case, seed)
    base, alts = _questions(case, x, seed)
    ref, fwd = oracle.answer(**base)
    fwd = oracle.as_key(fwd)  # (with sinks, a rounding's model rounds the sink too: one more score)
    predicts: dict[str, list[bool]] = {}
    dtype = DTYPES[case.dtype]
    for k, orders in precision._models(dtype).items():  # a rounding's error model on this case
        if k in keys:
            predicts[k] = [rule.max_err(oracle.unflatten(order(fwd, dtype), fwd), ref) > MARGIN * limit
                           for order in orders]
    for a in alts:
        key = apis._unnumbered(a.key)
        parts = [k for k in key.split("+") if k]
        if not parts or not set(parts) <= keys or len(parts) > 1:
            continue
        try:
            alt = a.out if a.change is None else explain.answer(a.change(dict(base)))[0]
        except (TypeError, ValueError, RuntimeError, IndexError, KeyError):
            continue
        if alt is None or alt.shape != ref.shape:
            continue
        far = float(torch.nan_to_num((alt - ref).abs(), nan=math.inf).amax()) > MARGIN * limit
        predicts.setdefault(parts[0], []).append(far)
    return {k for k, fails in predicts.items() if fails and all(fails)}


def _questions(case: Case, x, seed: int) -> tuple[dict, list]:
    """The oracle's arguments for the case and the alternatives the judge holds a failing output to there."""
    from attnlab.judge import judge

    fresh = judge._modifier(case, seed)
    mod64, _ = fresh(torch.float64, "cpu")
    q, k, v = (t.detach().double().cpu() for t in (x.q, x.k, x.v))
    if case.api:
        from types import SimpleNamespace

        return apis._questions(case, x, SimpleNamespace(fresh=fresh))
    base = dict(query=q, key=k, value=v, attn_mask=oracle.cpu64(x.dense), is_causal=case.is_causal, scale=case.scale,
                enable_gqa=case.gqa, keep=None, dropout_p=0.0, score_mod=mod64, sinks=x.sinks)
    from types import SimpleNamespace

    alts = list(hypotheses._alternatives(case, x, SimpleNamespace(keep=None)))
    return base, [a for a in alts if isinstance(a, explain.Alternative)]
