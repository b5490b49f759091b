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

from collections import Counter
from dataclasses import dataclass, field, replace

from attnlab.judge import causes as C
from attnlab.judge.explain import SUPPORT, TIE
from attnlab.judge.facts import SILENT
from attnlab.judge.precision import CAUSES as PRECISION
from attnlab.judge.precision import rounding
from attnlab.results import Result


@dataclass(frozen=True)
class Diagnosis(Result):
    key: str  # a stable name for the cause (attnlab.judge.causes)
    text: str  # one line in plain words
    count: int = 0  # failing cases that show it
    dtypes: list[str] = field(default_factory=list)  # the dtypes of those cases
    example: str = ""  # one of them


SUFFIX = " [{n} case(s), {dtypes}; e.g. {example}]"  # after each line's text: how many, where, one of them
KINDS = {"oracle": "oracle", "exit": "exit", "lost": "ended", "timeout": "hangs"}  # Facts.kind -> its line
PRECISE = 0.9  # a tag is a cause when at least this share of its cases fail
CONTRAST = 0.5  # ... and less than this share of the cases without it


def diagnose(result, form: str) -> list[Diagnosis]:
    """The causes of ``form``'s failures in a verify result, one line each, most cases first (empty when it passed)."""
    rows = _supported([r for r in result.rows if r.form == form and r.status != "skipped"])
    bad = [r for r in rows if r.status in ("fail", "error")]
    if not bad:
        return []
    plain = Counter(h for r in bad for h in r.hints if TIE not in h)  # the hints no other reading ties with
    lead = Counter(h.split(TIE)[0] for r in bad for h in r.hints if TIE in h)  # ... and those a tie puts first
    first: dict[str, list] = {}  # certain: the oracle's check, the contract, exits and hangs
    causes: dict[str, list] = {}  # what the numbers show
    raised: dict[tuple[str, str], list] = {}
    for r in bad:
        f = r.facts
        if f.kind in KINDS:
            first.setdefault(KINDS[f.kind], []).append(r)
        for p in f.problems:
            first.setdefault(p, []).append(r)
        if f.kind == "raised":
            raised.setdefault(f.exception(), []).append(r)
        for h in r.hints:
            if "=" not in h:  # "dead-rows=nan": what a cause's rows hold, said in its line (_fill)
                causes.setdefault(C.line_of(_settle(h, plain, lead)), []).append(r)
        if not r.hints and _gradients_only(r):
            causes.setdefault("gradients-only", []).append(r)
        elif not r.hints and _lse_only(r):
            causes.setdefault("lse-only", []).append(r)
    _one_rounding_per_dtype(causes)
    numbers = [r for r in bad if r.facts.kind in ("", "raised", "probe") and _by_numbers(r)]
    rest = [r for r in numbers if not r.hints and not _gradients_only(r) and not _lse_only(r)]
    told = [r for r in bad if not _refused(r) and _by_numbers(r)]  # what tags may speak for: not a refusal, which
    rest = [r for r in rest if not _refused(r)]  # says its own reason in its raises line
    lines = [(k, {}, g) for k, g in first.items() if k == "oracle"] + [(k, {}, g) for k, g in first.items()
                                                                        if k != "oracle"]
    found = []
    for key, group in causes.items():
        narrow = _narrower(rows, group, _scope(key))
        found.append((len(group), len(found), [(narrow, _fill(narrow, group), group)] * (narrow is not None)
                      + [(key, _fill(key, group), group)]))
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


def _supported(rows: list) -> list:
    """The rows with each supporting hint (``~key``: a case whose rows cannot tell readings apart, large logits, or
    whose log-sum-exp alone shows the cause) kept where another row names that cause on its own -- then it is that
    cause's row too, among a tie's readings the ones named -- and dropped elsewhere."""
    if not any(h.startswith(SUPPORT) for r in rows for h in r.hints):
        return rows
    own = [h for r in rows for h in r.hints if not h.startswith(SUPPORT)]
    plain = Counter(h for h in own if TIE not in h)
    lead = Counter(h.split(TIE)[0] for h in own if TIE in h)
    named = {_settle(h, plain, lead).split("=")[0] for h in own}

    def backed(h: str) -> str:
        """A supporting hint's readings that are named ("" where none is)."""
        return TIE.join(k for k in h[len(SUPPORT):].split(TIE) if k.split("=")[0] in named)

    def kept(hints):
        support = [b for b in map(backed, (h for h in hints if h.startswith(SUPPORT))) if b]
        own = [h for h in hints if not h.startswith(SUPPORT)]
        if support:  # a named cause the lse shows: the output's rounding-sized error on that row is that cause's
            own = [h for h in own if not rounding(h)]
        return list(dict.fromkeys(own + support))

    return [replace(r, hints=kept(r.hints)) if any(h.startswith(SUPPORT) for h in r.hints) else r for r in rows]


RETURNED = {"nan": "NaN", "mean": "the mean of V (every key weighted alike: a large finite number in place of -inf?)",
            "other": "neither zeros nor NaN"}  # dead-rows=...: what a function returns in the rows that see no key


YOURS = {  # a line whose rows matched the wrong semantics it names: what the function does, said beside the rule
    "causal-alignment": ("lower-right-for-upper-left",
                         "; yours is aligned lower-right (query i sees keys j <= i + S - L, as in KV-cache decoding)"),
    "gqa": ("gqa-repeat", "; yours gives query head h key head h % Hkv (repeat)"),
}


def _fill(key: str | None, group) -> dict:
    """The values a cause's line says beyond its count: for dead rows, what the function returns there; for a line
    that is a case tag's too, what the function does where its rows matched that (:data:`YOURS`)."""
    if key in YOURS:
        hint, words = YOURS[key]
        return {"yours": words if any(hint in h.split(TIE) for r in group for h in r.hints) else ""}
    if key != "dead-rows":
        return {}
    seen = sorted({h.split("=", 1)[1] for r in group for h in r.hints if h.startswith("dead-rows=")},
                  key=list(RETURNED).index)
    return {"returned": "; yours returns " + " or ".join(RETURNED[s] for s in seen) if seen else ""}


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
    for t in set.intersection(*(set(r.tags) for r in group)):
        mine = [r for r in rows if t in r.tags]
        if C.of_tag(t) and all(r.status != "pass" for r in mine) and len(mine) < len(scoped):
            best = t if best is None or len(mine) < _support(rows, best) else best
    return None if best is None else C.of_tag(best)


def _cover(rows, bad, rest):
    """(tag, its rows among ``rest``) for the tags that explain the unexplained rows: at least PRECISE of the
    tag's cases fail and less than CONTRAST of the others, it covers two rows or is one case's alone; each
    time the one that covers most (then the narrowest)."""
    failing = {id(r) for r in bad}
    sets = {t: [r for r in rows if t in r.tags] for t in {t for r in rows for t in r.tags} if C.of_tag(t)}
    half = [r for r in rows if r.dtype in ("bfloat16", "float16")]
    if half and sum(id(r) in failing for r in half) < 0.25 * len(half):  # full precision fails, half passes
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
            score = (len(covered), t == "precision", -len(mine))
            if best is None or score > best[0]:
                best = (score, t, covered)
        if best is None:
            return out
        out.append((best[1], best[2]))
        rest = [r for r in rest if id(r) not in {id(x) for x in best[2]}]
    return out


def _settle(hint: str, plain: Counter, lead: Counter) -> str:
    """A hint that is several readings of the same rows ("a|b", :data:`attnlab.judge.explain.TIE`): the one the
    function's other failing cases show alone most, else the one its ties put first most often, else the first."""
    if TIE not in hint:
        return hint
    keys = hint.split(TIE)
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
        if key in seen and key != "raises":
            continue
        seen.add(key)
        dts = sorted({r.dtype for r in group})
        where = ", ".join(dts) + (" only" if len(dts) < len(dtypes) else "")
        n = len(group)
        case = group[0].case
        text = C.table()[key].text.format(**{"n": n, "case": case, **fill})
        text += SUFFIX.format(n=n, dtypes=where, example=case)
        out.append(Diagnosis(key, text, len(group), dts, f"{group[0].case} [{group[0].dtype}]"))
    return out
