"""What the failures point to: one line for each cause, with how many cases show it, in which dtypes.

``verify`` says which cases fail and by how much; a person wants to know *why*, and a function
may have several bugs at once. Each failing row carries facts, not sentences
(:class:`attnlab.judge.facts.Facts`, its comparisons, and its hints: the wrong semantics its
output matched, tested row by row in :mod:`attnlab.judge.hypotheses`). The rows are grouped by
cause, and each group is one line:

1. the contract: an output of another dtype, inputs changed in place, an exit, a hang -- certain;
2. wrong semantics a row's output matched: "your output is attention without the 1/sqrt(E) scale";
   where the rows of that hint are exactly the cases of something narrower (a 0-d tensor scale),
   the narrower line comes first;
3. rows nothing explains, read by what their cases exercise (:attr:`attnlab.judge.cases.Case.tags`):
   the tag whose cases (nearly) all fail and which covers most of them is a cause, and so on
   until no such tag is left (so a bug in bfloat16 alone is named for bfloat16, whatever else
   fails); the rest is one "no single pattern" line;
4. exceptions, one line per type and message (numbers in the message aside).

Lines go most cases first, contract first of all. :func:`diagnose` returns :class:`Diagnosis` lines
for one function of a verify result.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace

from attnlab.judge import backward_precision
from attnlab.judge import causes as C
from attnlab.judge import hint as H
from attnlab.judge.confirm import ARGUMENTS, UNCHECKED
from attnlab.judge.facts import SILENT
from attnlab.judge.precision import CAUSES as PRECISION
from attnlab.judge.precision import rounding
from attnlab.judge.probes import learned
from attnlab.results import Result


@dataclass(frozen=True)
class Diagnosis(Result):
    key: str  # a stable name for the cause (attnlab.judge.causes)
    text: str  # one line in plain words
    count: int = 0  # failing cases that show it
    dtypes: list[str] = field(default_factory=list)  # the dtypes of those cases
    example: str = ""  # one of them
    measured: list[str] = field(default_factory=list)  # what a probe measured of it: the difference, and its map


SUFFIX = " [{n} case(s), {dtypes}; e.g. {example}]"  # after each line's text: how many, where, one of them
KINDS = {"oracle": "oracle", "exit": "exit", "lost": "ended", "timeout": "hangs", "busy": "busy",
         "ratio": "over-ratio"}  # Facts.kind -> its line
PLACED_RATIO = 64.0  # unexplained, at most this many times PyTorch's error, passing in another dtype: precision lost
PRECISE = 0.9  # a tag is a cause when at least this share of its cases fail
CONTRAST = 0.5  # ... and less than this share of the cases without it


def diagnose(result, form: str) -> list[Diagnosis]:
    """The causes of ``form``'s failures in a verify result, one line each, most cases first (empty when it passed)."""
    rows = _overflow_shown(_supported(_lone(_twinned([r for r in result.rows
                                                     if r.form == form and r.status != "skipped"]))))
    bad = [r for r in rows if r.status in ("fail", "error")]
    if not bad:
        return []
    plain = Counter(h.lead for r in bad for h in r.hints if not h.tied and not h.supporting)  # the hints no other
    lead = Counter(h.lead for r in bad for h in r.hints if h.tied)  # reading ties with, and those a tie puts first
    first, causes, raised = _grouped(bad, plain, lead)
    _written_as_read(first, bad, plain, lead)
    _one_rounding_per_dtype(causes)
    measured = _measured([replace(r, hints=[H.Hint((_settle(h, plain, lead),)) if _settle(h, plain, lead).startswith(
        MEASURED) else h for h in r.hints]) if r.hints else r for r in bad])
    numbers = [r for r in bad if r.facts.kind in ("", "raised", "probe") and _by_numbers(r)]
    rest = [r for r in numbers if not r.hints and not _said_measured(r) and not _gradients_only(r)
            and not _lse_only(r)]
    told = [r for r in bad if not _refused(r) and _by_numbers(r)]  # what tags may speak for: not a refusal, which
    rest = [r for r in rest if not _refused(r)]  # says its own reason in its raises line
    lines = [(k, {}, g) for k, g in first.items() if k == "oracle"] + [(k, _fill(k, g), g) for k, g in first.items()
                                                                        if k != "oracle"]
    quantity_only = [r for k in ("gradients-only", "lse-only") for r in causes.get(k, []) if not r.hints]
    unplaced, left = _unplaced(rows, rest + quantity_only)
    placed = {id(r) for group in unplaced.values() for r in group}
    rest = [r for r in rest if id(r) not in placed]
    for k in ("gradients-only", "lse-only"):  # a quantity alone failing, by a rounding's size: said as precision
        if k in causes:
            causes[k] = [r for r in causes[k] if id(r) not in placed]
            if not causes[k]:
                del causes[k]
    found = [(len(group), -1, [(key, {"measured": said}, group)]) for key, said, group in measured]
    for key, group in causes.items():
        narrow = _narrower(rows, group, _scope(key))
        found.append((len(group), len(found), [(narrow, _fill(narrow, group), group)] * (narrow is not None)
                      + [(key, _fill(key, group), group)]))
    if unplaced:  # one line, each dtype's error in it
        group = [r for g in unplaced.values() for r in g]
        found.append((len(group), len(found), [("precision-unplaced", _unplaced_words(rows, unplaced), group)]))
    for tag, group in _cover(rows, told, rest):
        found.append((len(group), len(found), [(C.of_tag(tag), _fill(C.of_tag(tag), group), group)]))
        rest = [r for r in rest if r not in group]
    for _, _, entries in sorted(found, key=lambda x: (-x[0], x[1])):
        lines += entries
    rest = [r for r in rest if r.facts.kind != "raised"]
    for (kind, _), group in sorted(raised.items(), key=lambda x: -len(x[1])):
        msg = group[0].facts.raised_message.splitlines()[0][:160] if group[0].facts.raised_message else ""
        lines.append(("raises", {"type": kind, "message": msg or "(no message)"}, group))
    if rest:
        w = rest[0].worst
        lines.append(("unclear", {"worst": f"{w.quantity}: {w.err:.3g} > {w.allowed:.3g}" if w else "-"}, rest))
    return _lines(lines, sorted({r.dtype for r in rows}))


READ_AS_WRITTEN = ("paged-page-id-off", "paged-table-index-off", "paged-table-ignored")


def _written_as_read(first: dict, bad, plain: Counter, lead: Counter) -> None:
    """A cache written as one wrong reading of it would write (a table entry off) is that reading's line only where
    the function's outputs read it that way too; elsewhere the writes are said as measured (paged-cache-written):
    a page looked up once for every appended token writes the tokens after a page's end where an entry off would."""
    read = {_settle(h, plain, lead) for r in bad for h in r.hints}
    for key in [k for k in first if k in READ_AS_WRITTEN and k not in read]:
        group = first.pop(key)
        first.setdefault("paged-cache-written", []).extend(group)
        for r in group:  # its measured sentence, under the line it now belongs to
            for m in r.measured:
                if m["kind"] == f"problem:{key}":
                    m["kind"] = "problem:paged-cache-written"


def _grouped(bad, plain: Counter, lead: Counter) -> tuple[dict, dict, dict]:
    """The failing rows by what says them: certain (the oracle's check, the contract, exits and hangs), a cause the
    numbers show (a hint, or only the gradients or the lse failing), an exception -- each key with its rows."""
    first: dict[str, list] = {}
    causes: dict[str, list] = {}
    raised: dict[tuple[str, str], list] = {}
    for r in bad:
        f = r.facts
        if f.kind in KINDS:
            first.setdefault(KINDS[f.kind], []).append(r)
        for p in f.problems:
            first.setdefault(p, []).append(r)
        if f.kind == "raised":
            raised.setdefault(f.exception(), []).append(r)
        if f.kind == "ratio":  # right by the rule, past --max-ratio: its own line says so, nothing else reads it
            continue
        for h in r.hints:
            if _settle(h, plain, lead).startswith(MEASURED):  # a probe's rule explains this row: it joins its line
                continue
            if not h.has_variant:  # "dead-rows=nan": what a cause's rows hold, said in its line (_fill)
                causes.setdefault(C.line_of(_settle(h, plain, lead)), []).append(r)
        if not r.hints and _gradients_only(r):
            causes.setdefault("gradients-only", []).append(r)
        elif not r.hints and _lse_only(r):
            causes.setdefault("lse-only", []).append(r)
    return first, causes, raised


MEASURED = "measured"  # the key of a line that says a probe's measured difference no cause's alternative fits


HALF_DTYPES = ("bfloat16", "float16")
LONE = 1  # a semantic cause named on this few cases of the grid (in any dtypes), and on no probe, is not said ...
DOMINANT = 3  # ... beside another cause named on at least this many, in a run where at least MANY cases fail
MANY = 10


def _overflow_shown(rows: list) -> list:
    """The rows without "max-subtraction" where the function's output is NaN or inf, unexplained, on cases of small
    scores too: exp overflowing large scores is that line's claim, and non-finite numbers where no score is large
    come from elsewhere (a softmax over another dim meets a column of -inf) -- what the failing cases share is said
    instead."""
    def nonfinite(r):
        return r.status == "fail" and not r.hints and any(  # (a wrong shape's comparison has no size: ref_max 0)
            c.quantity == "out" and not math.isfinite(c.err) and c.ref_max > 0 for c in r.comparisons)

    if not any(nonfinite(r) and "large-logits" not in r.tags for r in rows):
        return rows
    return [replace(r, hints=[h for h in r.hints if not h.only("max-subtraction")])
            if any(h.only("max-subtraction") for h in r.hints) else r for r in rows]


def _twinned(rows: list) -> list:
    """The rows read beside their twins, the same case in another dtype: a rounding named on a row whose float32 twin
    fails too is not that rounding (the error is there in float32, where no half-precision rounding is) and is
    taken out; a failing row left with nothing named takes its failing twin's named causes (float32's first), which
    the same inputs show in another dtype -- a bug whose error in bfloat16 sits near a rounding's size."""
    by = {(r.case, r.dtype): r for r in rows}
    out = []
    for r in rows:
        if r.status != "fail" or not r.hints:
            out.append(r)
            continue
        twin = by.get((r.case, "float32")) if r.dtype in HALF_DTYPES else None
        if twin is not None and twin.status == "fail" and any(rounding(h) for h in r.hints):
            r = replace(r, hints=[h for h in r.hints if not rounding(h)])
        out.append(r)
    named = {(r.case, r.dtype): [h for h in r.hints if not rounding(h) and not h.supporting] for r in out}
    for i, r in enumerate(out):
        if r.status == "fail" and not r.hints and not r.measured:
            for dt in ("float32", "float64", *HALF_DTYPES):
                if dt != r.dtype and named.get((r.case, dt)):
                    out[i] = replace(r, hints=named[(r.case, dt)])
                    break
    return out


def _lone(rows: list) -> list:
    """The rows without the semantic causes named on a single case of the grid and on no probe, beside a cause named on
    many: one case cannot tell a second cause from a reading that happens to fit its numbers (a key read one past a
    sequence's end, where the sequence reads every key up to max_seqlen_k); what its rows share is said instead. A
    function judged on a case or two keeps what they name."""
    cases: dict[str, set] = {}
    probed: set[str] = set()
    for r in rows:
        if r.status != "fail":
            continue
        for h in r.hints:
            for k in h.keys:
                if rounding(k) or H.measured(k) or H.has_variant(k) or k in UNCHECKED:
                    continue  # (what the output's shape shows -- NaN past exp's range -- is no reading of numbers)
                cases.setdefault(k, set()).add(r.case)
                if "probe" in r.tags:
                    probed.add(k)
    lone = {k for k, c in cases.items() if len(c) <= LONE and k not in probed}
    failing = {r.case for r in rows if r.status == "fail"}
    if not lone or len(failing) < MANY or not any(len(c) >= DOMINANT for k, c in cases.items() if k not in lone):
        return rows
    out = []
    for r in rows:
        kept = [k for k in (h.kept(lambda key: H.base(key) not in lone) for h in r.hints) if k]
        out.append(replace(r, hints=kept) if kept != r.hints else r)
    return out


def _said_measured(r) -> bool:
    """A probe row whose measured differences are said in a line of their own (:func:`_measured`)."""
    return any(not m["kind"].startswith("problem:") for m in r.measured)


def _measured(bad) -> list[tuple[str, list[str], list]]:
    """(key, the fact and its map, the rows) for each difference the failing probe rows measured that no named
    cause's alternative explains: one line per probe and kind of difference (the same probe in several dtypes is
    one line), keyed ``measured:<kind>``. Where a probe row's output matched a named cause, its measured difference
    goes with that cause's line instead (see :func:`_lines`)."""
    out: dict[tuple[str, str], tuple[list[str], list]] = {}  # (kind, pattern) -> (said, rows)
    joined: dict[tuple[str, str], list] = {}  # rows of other cases a probe's measured rule explains
    for r in bad:
        for h in r.hints:
            if not h.tied and _said_as_measured(h) and "@" in h.lead:
                kind, pattern = h.lead[len(MEASURED) + 1:].split("@", 1)
                joined.setdefault((kind, pattern), []).append(r)
        if not r.measured or any(not rounding(h) and not _said_as_measured(h) for h in r.hints):
            continue
        for m in r.measured:
            if m["kind"].startswith("problem:"):  # said under its problem's own line
                continue
            said, group = out.setdefault((m["kind"], learned.pattern(m) if m.get("pattern") else r.case),
                                         ([m["text"], *m["map"]], []))
            if r not in group:
                group.append(r)
    for where, rows in joined.items():
        if where in out:
            out[where][1].extend(r for r in rows if r not in out[where][1])
    return [(f"{MEASURED}:{kind}", said, group) for (kind, _), (said, group) in out.items()]


def _said_as_measured(h: H.Hint) -> bool:
    """A hint that is a probe's measured difference, said on its own account (not only supporting)."""
    return not h.supporting and h.lead.startswith(MEASURED)


def _supported(rows: list) -> list:
    """The rows with each supporting hint (``~key``: a case whose rows cannot tell readings apart, large logits, or
    whose log-sum-exp alone shows the cause) kept where another row names that cause on its own -- then it is that
    cause's row too, among a tie's readings the ones named -- and dropped elsewhere."""
    if not any(h.supporting for r in rows for h in r.hints):
        return rows
    own = [h for r in rows for h in r.hints if not h.supporting]
    plain = Counter(h.lead for h in own if not h.tied)
    lead = Counter(h.lead for h in own if h.tied)
    named = {H.base(_settle(h, plain, lead)) for h in own}

    def backed(h: H.Hint) -> H.Hint | None:
        """A supporting hint's readings that are named, as a hint of its own (None where none is)."""
        keys = tuple(k for k in h.keys if H.base(k) in named)
        return H.Hint(keys) if keys else None

    def kept(hints):
        support = [b for b in map(backed, (h for h in hints if h.supporting)) if b]
        own = [h for h in hints if not h.supporting]
        if support:  # a named cause the lse shows: the output's rounding-sized error on that row is that cause's
            own = [h for h in own if not rounding(h)]
        return list(dict.fromkeys(own + support))

    return [replace(r, hints=kept(r.hints)) if any(h.supporting for h in r.hints) else r for r in rows]


RETURNED = {"nan": "NaN", "mean": "the mean of V (every key weighted alike: a large finite number in place of -inf?)",
            "other": "neither zeros nor NaN"}  # dead-rows=...: what a function returns in the rows that see no key


YOURS = {  # a line whose rows matched the wrong semantics it names: what the function does, said beside the rule
    "causal-alignment": ("lower-right-for-upper-left",
                         "; yours is aligned lower-right (query i sees keys j <= i + S - L, as in KV-cache decoding)"),
    "gqa": ("gqa-repeat", "; yours gives query head h key head h % Hkv (repeat)"),
}


def _unplaced(rows, rest) -> tuple[dict[str, list], list]:
    """({dtype: rows}, the rest): the unexplained failing rows that are precision lost in their dtype, which no
    rounding model placed -- the same case passes in another dtype and the error is at most PLACED_RATIO times
    PyTorch's; or the error is a rounding's size (:func:`rounding_sized`) and the same case passes in a *more*
    precise dtype (precision lost is lost going down: a float32 computation rounded through bfloat16 errs 10^4 times
    PyTorch's float32 error, right in float64); or it fails in float64 by float32's rounding, right in float32 (a
    float32 step in a float64 call). A small formula error passes in a wide dtype's tolerance and fails in both full
    ones: not precision, and not said so."""
    passed = {(r.case, r.dtype) for r in rows if r.status == "pass"}
    out: dict[str, list] = {}
    left = []
    full = [r for r in rows if r.dtype not in HALF_DTYPES]
    if _half_passes(rows) and sum(r.status in ("fail", "error") for r in full) >= PRECISE * len(full):
        return out, list(rest)  # full precision fails where half passes: the "precision" line places it (_cover)
    for r in rest:
        twin = any((r.case, d) in passed for d in {x.dtype for x in rows} - {r.dtype})
        finer = any((r.case, d) in passed for d in PRECISION_ORDER[PRECISION_ORDER.index(r.dtype) + 1:]) \
            if r.dtype in PRECISION_ORDER else False
        ratio = _worst_ratio(r)
        if r.status == "fail" and (twin and ratio is not None and ratio[0] <= PLACED_RATIO
                                   or finer and rounding_sized(r) or _float32_in_float64(r, passed)):
            out.setdefault(r.dtype, []).append(r)
        else:
            left.append(r)
    return out, left


PRECISION_ORDER = ("bfloat16", "float16", "float32", "float64")  # least precise first
FLOAT32_ROUNDINGS = 64  # a float64 error within this many float32 roundings (eps) of the answer's size is float32's


def _float32_in_float64(r, passed: set) -> bool:
    """A float64 row whose case passes in float32 and whose every failing quantity is float32-sized: a float32 step
    in a float64 call."""
    fails = [c for c in r.comparisons if not c.passed]
    return r.dtype == "float64" and (r.case, "float32") in passed and bool(fails) and all(map(float32_sized, fails))


def size(c) -> float:
    """A quantity's size for its rounding: max|oracle|, and for the log-sum-exp at least 1 (its rounding is relative
    to its value)."""
    return max(c.ref_max, 1.0 if c.quantity == "lse" else 0.0)


def float32_sized(c) -> bool:
    """A comparison off by at most FLOAT32_ROUNDINGS float32 eps of its size."""
    return math.isfinite(c.err) and math.isfinite(c.ref_max) and c.err <= FLOAT32_ROUNDINGS * 2.0 ** -23 * size(c)


def _unplaced_words(rows, unplaced: dict[str, list]) -> dict:
    """The precision line's words: each dtype's error as a multiple of PyTorch's, and in which dtypes those very cases
    pass (every one of them run there and passed), or that each passes in some other dtype."""
    status = {(r.case, r.dtype): r.status for r in rows}
    ratio = "; ".join(f"{dt}: {ratio_words(g)}" for dt, g in sorted(unplaced.items()))
    group = [r for g in unplaced.values() for r in g]
    every = [dt for dt in sorted({r.dtype for r in rows} - set(unplaced))
             if all(status.get((r.case, dt)) == "pass" for r in group)]
    passing = (f"the same cases pass in {', '.join(every)}" if every
               else "each of these cases passes in another dtype")
    return {"ratio": ratio, "passing": passing}


SMALL = 1 / 16  # a failing quantity off by at most this share of its own size is off by a rounding, not a formula
SPREAD = 0.5  # ... and uneven, as roundings are: its mean error at most this share of its largest (a shift of every
# number by the same amount is not a rounding)


def rounding_sized(r) -> bool:
    """Each failing quantity of the row is off by at most SMALL of its size (max|oracle|; for the log-sum-exp at
    least 1, as its rounding is relative to its value), and unevenly (SPREAD): the size and the spread a
    half-precision rounding on the way gives, where a wrong formula moves the answer by its own size or shifts it."""
    fails = [c for c in r.comparisons if not c.passed]
    return bool(fails) and all(math.isfinite(c.err) and math.isfinite(c.ref_max) and c.mean_err <= SPREAD * c.err
                               and c.err <= SMALL * size(c) for c in fails)


def _worst_ratio(r) -> tuple[float, str] | None:
    """(err / PyTorch's err, quantity) of a row's failing quantity furthest past PyTorch's, where PyTorch erred."""
    xs = [(c.err / c.torch_err, c.quantity) for c in r.comparisons
          if not c.passed and math.isfinite(c.err) and math.isfinite(c.torch_err) and c.torch_err > 0]
    return max(xs) if xs else None


def ratio_words(group) -> str:
    """A group's error as a multiple of PyTorch's: the median and the worst over its rows, which quantities fail."""
    xs = sorted(x for x in map(_worst_ratio, group) if x is not None)
    failing = sorted({c.quantity for r in group for c in r.comparisons if not c.passed},
                     key=["out", "dq", "dk", "dv", "lse"].index if all(
                         c.quantity in ("out", "dq", "dk", "dv", "lse") for r in group for c in r.comparisons)
                     else str)
    where = "the " + " and ".join(failing) if failing else "no quantity"
    if not xs:
        return f"{where} fail"
    med, top = xs[len(xs) // 2], xs[-1]
    return (f"{med[0]:.3g}x PyTorch's error on {where} (median of {len(xs)} cases; worst {top[0]:.3g}x on "
            f"{top[1]})")


def _fill(key: str | None, group) -> dict:
    """The values a cause's line says beyond its count: for dead rows, what the function returns there; for a line
    that is a case tag's too, what the function does where its rows matched that (:data:`YOURS`); for a dtype's
    line, its error as a multiple of PyTorch's."""
    if key in ("bfloat16", "float16", "float32", "float64"):
        return {"ratio": ": " + ratio_words(group)}
    if key == "over-ratio":
        return {"ratio": ratio_words(group)}
    if key == "busy":  # what the machine's load and the function's own time were (pace.Spent.words)
        return {"said": group[0].detail.removeprefix("not decided: ").split(", twice")[0]}
    if key in YOURS:
        hint, words = YOURS[key]
        return {"yours": words if any(h.names(hint) for r in group for h in r.hints) else ""}
    if key == "bwd-half":
        return {"steps": _steps(group)}
    if key != "dead-rows":
        return {}
    seen = sorted({H.variant(h.lead) for r in group for h in r.hints
                   if not h.tied and h.has_variant and H.base(h.lead) == "dead-rows"},
                  key=list(RETURNED).index)
    return {"returned": "; yours returns " + " or ".join(RETURNED[s] for s in seen) if seen else ""}


def _steps(group) -> str:
    """The backward's rounded steps a bwd-half line's rows fit, the most rows first (at most three)."""
    seen = Counter(H.variant(h.lead) for r in group for h in r.hints
                   if not h.tied and h.has_variant and H.base(h.lead) == backward_precision.KEY)
    said = list(dict.fromkeys(backward_precision.words(v) for v, _ in seen.most_common()))
    return " or ".join(said[:3]) or "a step of the backward"


def _by_numbers(r) -> bool:
    """A failing row the numbers speak for: one with no contract problem, or only problems that say nothing of the
    output and a comparison beyond the log-sum-exp that failed (a function that returns no lse, and more wrong)."""
    if not r.facts.problems:
        return True
    return set(r.facts.problems) <= set(SILENT) and any(not c.passed for c in r.comparisons if c.quantity != "lse")


REFUSALS = ("AssertionError", "NotImplementedError")  # exceptions a function raises on purpose, saying why


def _refused(r) -> bool:
    """A row the function refused by an exception of its own (an assert, NotImplementedError): its raises line says
    it, and no case tag speaks for it -- where a crash (a view that cannot be, a shape unpacked) is the symptom a
    tag names ("only non-contiguous inputs fail")."""
    return r.facts.kind == "raised" and r.facts.raised_type in REFUSALS


def _one_rounding_per_dtype(causes: dict) -> None:
    """One rounding per dtype: where precision causes are named for a dtype's rows, the one with most rows speaks for
    them all (two error models that both fit one function's cases are one rounding, told two ways), and rows of
    that dtype whose gradients alone, or log-sum-exp alone, fail are that rounding's too (it reaches them through
    the same weights), not a backward or an lse of their own."""
    _backward_fits_most(causes)
    for dtype in sorted({r.dtype for k in PRECISION for r in causes.get(k, ())}):
        named = sorted((k for k in PRECISION if any(r.dtype == dtype for r in causes.get(k, ()))),
                       key=lambda k: -sum(r.dtype == dtype for r in causes[k]))
        for key in (*named[1:], "gradients-only", "lse-only"):
            moved = [r for r in causes.get(key, ()) if r.dtype == dtype]
            causes[named[0]] += [r for r in moved if r not in causes[named[0]]]
            causes[key] = [r for r in causes.get(key, ()) if r.dtype != dtype]
    for key in (*PRECISION, "gradients-only", "lse-only"):
        if key in causes and not causes[key]:
            del causes[key]


def _backward_fits_most(causes: dict) -> None:
    """A backward's rounding (bwd-half) is read only in a dtype where it fits at least as many rows as fail their
    gradients alone unplaced: a deterministic rounding fits every case it fails, and one fit among many that do not
    is a coincidence of a few entries, not the cause of the rest -- its rows are gradients alone again."""
    key = backward_precision.KEY
    for dtype in sorted({r.dtype for r in causes.get(key, ())}):
        fit = [r for r in causes[key] if r.dtype == dtype]
        if len(fit) < sum(r.dtype == dtype for r in causes.get("gradients-only", ())):
            causes[key] = [r for r in causes[key] if r.dtype != dtype]
            causes.setdefault("gradients-only", []).extend(fit)
    if key in causes and not causes[key]:
        del causes[key]


def _gradients_only(r) -> bool:
    """The output passed and a gradient failed (and the gradients were there to compare)."""
    return (r.status == "fail" and len(r.comparisons) > 1 and r.comparisons[0].quantity == "out"
            and r.comparisons[0].passed and not r.facts.problems
            and any(not c.passed for c in r.comparisons if c.quantity != "lse"))


def _lse_only(r) -> bool:
    """An API's case whose log-sum-exp alone failed."""
    failed = [c.quantity for c in r.comparisons if not c.passed]
    return r.status == "fail" and failed == ["lse"] and not r.facts.problems


def _narrower(rows, group, scope: tuple[str, ...] | None) -> str | None:
    """The key of the most specific tag whose cases all fail and hold a hint's ``group``, when the hint does not
    fail its whole scope (a 0-d tensor scale, not every scale=; float masks, not every mask)."""
    if scope is None:
        return None
    scoped = [r for r in rows if set(r.tags) & set(scope)]
    if all(r.status != "pass" for r in scoped):
        return None
    best = None
    for t in sorted(set.intersection(*(set(r.tags) for r in group))):
        mine = [r for r in rows if t in r.tags]
        if C.of_tag(t) and all(r.status != "pass" for r in mine) and len(mine) < len(scoped):
            best = t if best is None or len(mine) < _support(rows, best) else best
    return None if best is None else C.of_tag(best)


def _half_passes(rows) -> bool:
    """Half precision's cases run and (nearly) all pass, and some full-precision case fails."""
    half = [r for r in rows if r.dtype in HALF_DTYPES]
    return bool(half) and sum(r.status in ("fail", "error") for r in half) < 0.25 * len(half) and any(
        r.status in ("fail", "error") for r in rows if r.dtype not in HALF_DTYPES)


def _cover(rows, bad, rest):
    """(tag, its rows among ``rest``) for the tags that explain the unexplained rows: at least PRECISE of the
    tag's cases fail and less than CONTRAST of the others, it covers two rows or is one case's alone; each
    time the one that covers most (then the narrowest)."""
    failing = {id(r) for r in bad}
    sets = {t: [r for r in rows if t in r.tags] for t in sorted({t for r in rows for t in r.tags}) if C.of_tag(t)}
    if _half_passes(rows):  # full precision fails, half passes
        sets["precision"] = [r for r in rows if r.dtype in ("float32", "float64")]
    out = []
    while rest:
        ids = {id(r) for r in rest}
        best = None
        for t, mine in sets.items():
            covered = [r for r in mine if id(r) in ids]
            if not covered or len(mine) == len(rows) or sum(id(r) in failing for r in mine) < PRECISE * len(mine):
                continue
            if len(covered) < 2 and len(mine) > 1:  # one row a wider tag happens to hold says nothing of the tag
                continue
            inside = {id(r) for r in mine}
            others = [r for r in rows if id(r) not in inside]
            if len(others) < 2 or sum(id(r) in failing for r in others) >= CONTRAST * len(others):
                continue  # the cases without the tag fail as much, or too few ran to tell: not what they share
            score = (len(covered), t == "precision", t in ARGUMENTS, -len(mine))  # an API argument before a shape
            if best is None or score > best[0]:
                best = (score, t, covered)
        if best is None:
            return out
        out.append((best[1], best[2]))
        rest = [r for r in rest if id(r) not in {id(x) for x in best[2]}]
    return out


def _settle(hint: H.Hint, plain: Counter, lead: Counter) -> str:
    """A hint that is several readings of the same rows (a tie: :mod:`attnlab.judge.hint`): the one the function's
    other failing cases show alone most, else the one its ties put first most often, else the first."""
    if not hint.tied:
        return hint.lead
    keys = list(hint.keys)
    measured = [k for k in keys if H.measured(k)]
    if measured and not any(plain[k] for k in keys if k not in measured):  # a name no other case gives alone: the
        return measured[0]  # measured difference it ties with is said, as the fact it is
    return max(keys, key=lambda k: (plain[k], lead[k], -keys.index(k)))


def _scope(key: str) -> tuple[str, ...] | None:
    c = C.table().get(key)
    return c.scope if c is not None and c.scope else None


def _support(rows, tag: str | None) -> int:
    """On how many of the rows the case has ``tag`` (None: every row)."""
    return len(rows) if tag is None else sum(tag in r.tags for r in rows)


def _lines(entries, dtypes: list[str]) -> list[Diagnosis]:
    """One Diagnosis per key (the first entry of a key wins), with its count, dtypes and an example."""
    out, seen = [], set()
    for key, fill, group in entries:
        said = fill.get("measured")
        if key in seen and key != "raises" and said is None:
            continue
        seen.add(key)
        dts = sorted({r.dtype for r in group})
        where = ", ".join(dts) + (" only" if len(dts) < len(dtypes) else "")
        n = len(group)
        case = group[0].case
        if said is not None:  # a probe's measured difference, said as the fact it is
            text, shown = said[0], said[1:]
        else:
            text = C.table()[key].text.format(**{"n": n, "case": case, **fill})
            shown = _shown(key, group)
        text += SUFFIX.format(n=n, dtypes=where, example=case)
        out.append(Diagnosis(key, text, len(group), dts, f"{group[0].case} [{group[0].dtype}]", shown))
    return out


def _shown(key: str, group) -> list[str]:
    """What a probe measured on the rows of a named cause: its difference from the spec, which the cause fits (the
    first probe row's, with its map)."""
    for r in group:
        said = [m for m in r.measured if m["kind"] == f"problem:{key}"]
        if said:
            return ["measured: " + said[0]["text"]]
        if r.measured and any(C.line_of(h.lead) == key or h.only(key) for h in r.hints):
            m = next((m for m in r.measured if not m["kind"].startswith("problem:")), None)
            if m is not None:
                return ["measured: " + m["text"], *m["map"]]
    return []
