"""The smallest case that still fails, for each cause: what a kernel author debugs from.

A case of the grid is chosen to catch a bug, not to be read: 2 x 4 heads x 64 queries x 64 keys is 32,768 weights,
and the bug shows in a handful of them. For each cause verify names (:mod:`attnlab.judge.diagnose`),
:func:`reproduce` takes one of the cause's failing cases and shrinks it: each size in turn -- every batch dim, the
key heads and the query heads each key head serves, L, S, the head dims E and Ev -- is halved, else decremented,
for as long as the smaller case still fails *the same way*. The same way is what the diagnosis reads: the smaller
case, diagnosed alone, still gets the cause's line -- the same wrong semantics matched (a hint), the same contract
problem, an exception of the same type; for a cause read from what the failing cases share (their tags: bfloat16,
non-contiguous inputs), the smaller case keeps those tags and still fails with nothing else to explain it.

Each smaller case is judged as verify judges it (oracle, PyTorch, the rule, the hints), the function in its own
process where it runs there. The smallest is then written as a standalone script (:mod:`.repro_script`) that
builds its inputs, calls the function as the judge did and prints its error against PyTorch in float64.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import SimpleNamespace

from attnlab.judge import apis, inference, judge, repro_script, verify
from attnlab.judge import causes as C
from attnlab.judge.apart.remote import Remote
from attnlab.judge.apart.watchdog import case_limit, watched
from attnlab.judge.cases import Case
from attnlab.judge.diagnose import diagnose
from attnlab.results import Result
from attnlab.results.files import CannotWrite

TRIES = 80  # smaller cases judged per cause, at most
SECONDS = 30.0  # and seconds spent shrinking one cause, at most
UNSHRUNK = ("oracle", "hangs", "ended", "exit")  # causes of the judge or of the process: the case is shown as it is
NO_SCRIPT = ("oracle",)  # the judge's own disagreement: nothing of the function's to reproduce


@dataclass
class Repro(Result):
    """One cause's reproducer: the grid's case it started from, the smallest that still fails that way, the script."""

    form: str
    cause: str  # the cause's key (attnlab.judge.causes)
    case: str  # the grid's case it was shrunk from, with its dtype
    grid: dict  # that case's sizes (see sizes)
    smallest: dict  # the smallest case's sizes
    tries: int = 0  # smaller cases judged
    errors: dict = field(default_factory=dict)  # quantity -> [error, limit] on the smallest case, where it failed
    script: str = ""  # the script's path ("" when none was written)
    why: str = ""  # why no script was written
    diagnosis: str = ""  # the line it reproduces, as diagnose said it (several "raises" lines share one key)
    shows: str = ""  # what the smallest case shows of the cause (a contract problem, an exception), where not errors

    def line(self) -> str:
        """What the report says of it: the smallest case, what it shows of the cause (a contract problem, an
        exception, else its worst error), and the script."""
        changed = {k: v for k, v in self.smallest.items() if v != self.grid.get(k)}
        were = ", ".join(f"{k}={self.grid[k]}" for k in changed)
        shrunk = f" (from {were}: {self.tries} smaller cases tried)" if changed else (
            f" (no smaller case fails this way: {self.tries} tried)" if self.tries else "")
        worst = max(self.errors.items(), key=lambda kv: kv[1][0] / kv[1][1] if kv[1][1] > 0 else math.inf,
                    default=None)
        err = f"; {self.shows}" if self.shows else (
            f"; {worst[0]} off by {worst[1][0]:.3g}, limit {worst[1][1]:.3g}" if worst else "")
        where = f"; reproducer: {self.script}" if self.script else (f"; no script: {self.why}" if self.why else "")
        return f"smallest: {self.case} at {said(self.smallest)}{shrunk}{err}{where}"

    def of(self, d) -> bool:
        """Whether it reproduces the diagnosis line ``d`` (its key, and its text where it kept one)."""
        return self.cause == d.key and self.diagnosis in ("", d.text)


@dataclass
class Reproduced(verify.VerifyResult):
    """verify's result with, for each function that failed, its causes' reproducers (what ``verify --json`` writes
    when they were made)."""

    repros: dict[str, list[Repro]] = field(default_factory=dict)

    @classmethod
    def of_result(cls, result: verify.VerifyResult, repros: dict[str, list[Repro]]) -> Reproduced:
        return cls(**{f.name: getattr(result, f.name) for f in fields(result)}, repros=repros)


def said(s: dict) -> str:
    """Sizes in a few words: the key heads and Ev where they differ from H and E, S where it differs from L."""
    skip = {"Hkv": s.get("Hkv") == s.get("H"), "S": s.get("S") == s.get("L"), "Ev": s.get("Ev") == s.get("E")}
    return ", ".join(f"{k}={v}" for k, v in s.items() if not skip.get(k))


def sizes(case: Case) -> dict:
    """The sizes shrinking changes: batch dims, query heads H, key heads Hkv, L, S, E, Ev."""
    return {"batch": list(case.batch), "H": case.H, "Hkv": case.Hkv or case.H, "L": case.L, "S": case.S or case.L,
            "E": case.E, "Ev": case.Ev or case.E}


def _dims(case: Case) -> list[str]:
    """The sizes of ``case`` that can shrink: those an API's own arguments do not fix (see :func:`_fixed`)."""
    fixed = _fixed(case)
    dims = [] if "batch" in fixed else [f"batch{i}" for i in range(len(case.batch))]
    dims += ["Hkv", "G"] if case.gqa else ["H"]
    dims += [d for d in ("L", "S") if d not in fixed and (d == "L" or case.S is not None)]
    return dims + ["E"] + (["Ev"] if case.Ev is not None else [])


def _fixed(case: Case) -> set[str]:
    """The sizes an API case's words fix: a number in them other than a window (``q=5,17``: packed lengths;
    ``seqlens=``, ``block=``: a page table) sizes the case, so its batch and lengths stay as they are."""
    if not case.api:
        return set()
    _, args = apis.parse(case.api)
    sized = any(not isinstance(v, bool) and k != "window" for k, v in args.items())
    return {"batch", "L", "S"} if sized else set()


def _resized(case: Case, dim: str, n: int) -> Case:
    """``case`` with one size set to ``n`` (``G``: query heads per key head; ``Hkv``: key heads, G kept)."""
    if dim.startswith("batch"):
        i = int(dim[5:])
        return replace(case, batch=case.batch[:i] + (n,) + case.batch[i + 1:])
    if dim == "H":
        return replace(case, H=n, Hkv=None if case.Hkv is None else n)
    if dim in ("Hkv", "G"):
        G, Hkv = case.H // case.Hkv, case.Hkv
        G, Hkv = (G, n) if dim == "Hkv" else (n, Hkv)
        return replace(case, H=G * Hkv, Hkv=Hkv)
    return replace(case, **{dim: n})


def _size(case: Case, dim: str) -> int:
    if dim.startswith("batch"):
        return case.batch[int(dim[5:])]
    return {"H": case.H, "Hkv": case.Hkv, "G": case.H // (case.Hkv or case.H), "L": case.L, "S": case.S or case.L,
            "E": case.E, "Ev": case.Ev or case.E}[dim]


def shrink(judged, case: Case, row, same, tries: int = TRIES, seconds: float = SECONDS):
    """The smallest case found from ``case`` (whose row is ``row``) for which ``same(judged(smaller))`` holds:
    each size halved, else decremented, while it holds; rounds until no size moves. Returns (case, row, tries)."""
    n, end = 0, time.monotonic() + seconds
    moved = True
    while moved:
        moved = False
        for dim in _dims(case):
            while n < tries and time.monotonic() < end:
                size = _size(case, dim)
                for smaller in dict.fromkeys(s for s in (size // 2, size - 1) if 1 <= s < size):
                    n += 1
                    got = judged(_resized(case, dim, smaller))
                    if got is not None and same(got):
                        case, row, moved = _resized(case, dim, smaller), got, True
                        break
                else:
                    break
    return case, row, n


def _keys(row, form: str) -> set[str]:
    """The causes ``row``'s failure is read as when it is diagnosed alone, and every reading of a hint that ties
    several ("a|b": which one is said is settled by the function's other cases)."""
    return {d.key for d in diagnose(SimpleNamespace(rows=[row]), form)} | _readings(row)


def _readings(row) -> set[str]:
    """The causes the row's hints speak for, every reading of a tie among them."""
    return {C.line_of(k) for h in row.hints if not h.has_variant for k in h.keys}


def same_way(row, key: str, form: str, claimed: frozenset[str] = frozenset()):
    """A test of whether another row fails the way ``row`` fails for ``key``: where ``row`` alone is diagnosed with
    that key (a hint, a contract problem, an exception of the same type and message), the other row alone is too;
    for a cause read from the tags the failing cases share, the other row keeps those tags and fails with nothing to
    explain it but what explained ``row``. ``claimed``: the tags the function's other lines are read from -- a row
    of "no single pattern" that gains one of them is another line's (an L=1 case where "only L = 1 fails")."""
    base = _keys(row, form)  # what the row alone is read as (a hint's wider line, where the cause is its narrower)
    alone = key in base
    tags = set(row.tags) & set(C.table()[key].tags) if key in C.table() else set()
    kind = _raised(row)

    def same(other) -> bool:
        if other.status not in ("fail", "error"):
            return False
        if key == "raises" and _raised(other) != kind:
            return False
        if key == "unclear" and (set(other.tags) - set(row.tags)) & claimed:
            return False
        found = _keys(other, form)
        if alone:
            return key in found
        return tags <= set(other.tags) and found <= base | {key, "unclear"}

    return same


def _raised(row) -> tuple[str, str]:
    """An exception as diagnose tells one line from another: its type and message, the numbers in it aside."""
    return row.facts.exception()


def _claimed(diagnoses) -> frozenset[str]:
    """The case tags the lines other than "no single pattern" are read from (the full-precision dtypes for
    "passes in bfloat16")."""
    keys = {d.key for d in diagnoses} - {"unclear"}
    tags = {t for k in keys if k in C.table() for t in C.table()[k].tags}
    return frozenset(tags | ({"float32", "float64"} if "precision" in keys else set()))


def _start(rows, by: dict, d, form: str, claimed: frozenset[str] = frozenset()):
    """(the failing row to shrink for the diagnosis ``d``, its case, the test of failing the same way): of the rows
    of ``d``'s dtypes that fail its way alone, a case of the grid where there is one (a probe's designed inputs are
    its size: it is not shrunk), one without a score modifier or dropout where there is one (a
    script for those needs the oracle's answer written in), then the smallest (each smaller case judged costs in
    proportion), then the plainest (the fewest tags); the diagnosis's example where no row does."""
    first = next((r for r in rows if f"{r.case} [{r.dtype}]" == d.example), None)
    if first is None or (first.case, first.dtype) not in by:
        return None, None, None
    same = same_way(first, d.key, form, claimed)
    fit = [r for r in rows if (r.case, r.dtype) in by and r.status in ("fail", "error") and r.dtype in d.dtypes
           and same(r)]
    row = min(fit or [first], key=lambda r: ("probe" in r.tags, bool({"mod", "dropout"} & set(r.tags)),
                                             by[r.case, r.dtype].work, len(r.tags)))
    return row, by[row.case, row.dtype], same


def _name(form: str, key: str, several: bool, taken: set[str] = frozenset()) -> str:
    """The script's file name: repro_<cause>.py (with the function's name first when several are judged; an
    exception's cause with its type, repro_raises_ValueError.py), numbered where a name is ``taken`` (two lines
    of one exception type, told apart by their messages)."""
    def word(t: str) -> str:
        return "".join(ch if ch.isalnum() else "_" for ch in t).strip("_")

    stem = f"repro_{word(form) + '_' if several else ''}{word(key)}"
    return next(name for n in range(1, len(taken) + 2) if (name := stem + (f"_{n}" if n > 1 else "") + ".py")
                not in taken)


def _shows(row, key: str) -> str:
    """What ``row`` shows of a cause that is no quantity's error: the contract problem as the row says it, or the
    exception it raised (a cause read from what failing cases share may be one of raising cases); "" where its
    errors say it."""
    if row.facts.raised_type and (key == "raises" or not any(not c.passed for c in row.comparisons)):
        msg = row.facts.raised_message.splitlines()[0][:160] if row.facts.raised_message else "(no message)"
        return f"raises {row.facts.raised_type}: {msg}"
    if key not in row.facts.problems:
        return ""
    said = row.detail.split("; ")  # the problems' sentences, in the order of their keys
    return said[row.facts.problems.index(key)] if len(said) == len(row.facts.problems) else row.detail


@dataclass(frozen=True)
class Judging:
    """How the function is judged, as verify judged it (see :func:`attnlab.judge.verify.verify`)."""

    seed: int = 0
    device: str = "cpu"
    timeout: float | None = 10.0
    backward: bool = True
    factor: float = 2.0
    ours: bool = False  # one of attnlab's forms (given mask functions as they are)
    shared_dropout: bool = False  # its dropout is attnlab's counter-based one


def _judged(fn, form: str, how: Judging, explain: bool = True):
    """``judged(case) -> Row | None``: one case judged as verify judges it (None: it could not be, or the function's
    process is gone); ``explain``: with the wrong semantics its output matches (what a hint's cause needs)."""
    def judged(c: Case):
        if isinstance(fn, Remote):
            if fn.lost is not None:
                return None
            fn.deadline = None if how.timeout is None else case_limit(c, how.timeout)
        run = functools.partial(verify.check_case, form, fn, c, c.seed(how.seed), how.ours, how.shared_dropout,
                                how.device, backward=how.backward, factor=how.factor, explain=explain)
        try:
            if how.ours or how.timeout is None or isinstance(fn, Remote):
                return run()
            return watched(run, case_limit(c, how.timeout))
        except Exception:  # noqa: BLE001 -- a size the case cannot have (its inputs or oracle refuse it): not smaller
            return None

    return judged


def reproduce(fn, form: str, result, cases: list[Case], how: Judging = Judging(), *, spec: str | None = None,
              api: str = "sdpa", folder: str | Path | None = None, several: bool = False, tries: int = TRIES,
              seconds: float = SECONDS) -> list[Repro]:
    """For each cause of ``form``'s failures in ``result`` (verify's, on ``cases``): the smallest case that still
    fails that way (``tries``, ``seconds``: at most so many smaller cases judged, or seconds spent, a cause), and
    with ``folder`` a script for it (``spec``: how the script imports ``fn``, verify's ``--impl``; ``api``: the API
    it is written to). ``fn`` is the function verify judged (a :class:`Remote` for one in its own process). Each
    line gets its own: one per exception type and message, the "no single pattern" line from its own rows."""
    rows = [r for r in result.rows if r.form == form]
    by = {(c.name, c.dtype): c for c in cases}
    found = result.diagnoses.get(form, [])
    claimed, taken, out = _claimed(found), set(), []
    for d in found:
        row, case, same = _start(rows, by, d, form, claimed)
        if row is None:
            continue
        hinted = d.key in _readings(row)  # only a hint's cause needs the hints read
        small, srow, n = (case, row, 0) if d.key in UNSHRUNK or case.probe else shrink(
            _judged(fn, form, how, hinted), case, row, same, tries, seconds)  # (a probe's design is its size)
        rep = Repro(form, d.key, f"{case.name!r} [{case.dtype}]", sizes(case), sizes(small), n,
                    {c.quantity: [c.err, c.allowed] for c in srow.comparisons if not c.passed}, diagnosis=d.text,
                    shows=_shows(srow, d.key))
        if folder is not None:
            text = d.text.rsplit(" [", 1)[0]  # the line as verify said it, without its count
            name = _name(form, f"raises_{srow.facts.raised_type}" if d.key == "raises" else d.key, several, taken)
            taken.add(name)
            _script(rep, text, fn, small, srow, Path(folder) / name, spec or form, api, how)
        out.append(rep)
    return out


def _script(rep: Repro, text: str, fn, case: Case, row, path: Path, spec: str, api: str, how: Judging) -> None:
    """Write the cause's script (or say in ``rep.why`` why none was)."""
    if rep.cause in NO_SCRIPT:
        rep.why = "the judge's own disagreement, not the function's"
        return
    s = case.seed(how.seed)
    try:
        x = verify.inputs(case, s, how.device)
        keep = None
        if case.dropout_p > 0:
            keep = verify.shared_keep(case, s, how.device) if how.shared_dropout else verify.probe_keep(
                fn, case, x, s, how.ours)[0]
        exp = judge.expect(case, s, x, keep)
        sized, grid = said(rep.smallest), said(rep.grid)
        rep.script = repro_script.write(path, spec=spec, api=api, cause=rep.cause, text=text, case=case, seed=s,
                                        device=how.device, row=row, x=x, exp=exp, grid=grid, smallest=sized,
                                        backward=how.backward, limits=_limits(row, case, exp, how))
    except repro_script.NoScript as e:
        rep.why = str(e)
    except CannotWrite:  # --repro DIR on a full disk: the command's one line, as for any folder it cannot write
        raise
    except Exception as e:  # noqa: BLE001 -- e.g. the function's process ended while its dropout was read again
        rep.why = f"it could not be made: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _limits(row, case: Case, exp, how: Judging) -> dict:
    """Each quantity's limit on the case, as the rule set it: the row's own, or for a row with none (the function
    raised) the limits the rule sets whatever the function returns, the inference path's outputs held to the
    output's -- what the script holds the function to once it stops raising."""
    if row.comparisons:
        return {c.quantity: c.allowed for c in row.comparisons if math.isfinite(c.allowed)}
    comps = judge._compare(case, (), exp, how.backward, how.factor)  # no output: the limits alone
    out = {c.quantity: c.allowed for c in comps if math.isfinite(c.allowed)}
    return out | {inference.quantity(mode): out["out"] for mode, _, _ in inference.MODES if "out" in out}
