"""Which wrong semantics a failing output is, row by row, so that one cause does not hide another.

A failing output is held, one query row at a time, against the oracle's answers to slightly different
questions (:class:`Alternative`: the scale ignored, the causal mask aligned the other way, an API's window
swapped ...). An alternative explains the output when, on every row where its answer differs from the right
one, the function gave that answer -- or, on a row that sees no key under it, what a function with a dead-row
bug gives there: NaN (a plain softmax of -inf), or the mean of V (a large finite number in place of -inf
weighs every key alike). Those rows are then the alternative's; where they hold the mean of V it says so
("dead-rows" beside its key) -- a NaN there is what any plain softmax gives a row the wrong mask left empty, and is
named only where the right mask leaves a row empty too.

The alternatives are taken greedily, the one that explains most failing rows first; the rows left are tested
again, against the others and against pairs of them (two bugs in the same rows: the scale ignored *and* the key
heads repeated), each pair the second change made on top of the first. So a function whose causal mask is
aligned lower-right and whose rows with no key return mean(V) gets both lines, where a test of one answer at
a time finds neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnlab.judge import oracle
from attnlab.judge.hint import tie, tied

PAIRS = 6  # the alternatives that come closest on the rows left, tried two at a time
CLOSER = 0.5  # ... "closest": the rows where an alternative is at most this share of the right answer's distance
PAIR_READINGS = 2  # at most this many second changes may explain the same rows beside one cause (a tie of two)
RESIDUE = 0.5  # where more than this share of the failing rows stays unexplained, a cause must explain this share


@dataclass(frozen=True)
class Alternative:
    """A wrong semantics: ``key`` (several keys joined by "+": bugs a from-scratch version has together), and how
    its answer is computed -- ``change`` maps the oracle's keyword arguments (:func:`oracle.answer`'s: query, key,
    value, attn_mask, is_causal, scale, enable_gqa, keep, dropout_p, score_mod) to the wrong question's, so that two
    changes compose; or ``out``, an answer computed otherwise, which composes with nothing."""

    key: str
    change: Callable[[dict], dict] | None = None
    out: torch.Tensor | None = None


@dataclass(eq=False)  # fits are told apart by identity (their fields are tensors)
class _Fit:
    """How one alternative's answer meets the function's, row by row ((..., L) bool each)."""

    key: str
    differs: torch.Tensor  # the alternative's answer is not the right one
    ok: torch.Tensor  # the function gave the alternative's answer (or its dead-row variant)
    dead_answers: list[str] = field(default_factory=list)  # "nan" / "mean": what the function's dead rows hold
    used_dead: torch.Tensor | None = None  # the rows its dead-row variant explains
    change: Callable[[dict], dict] | None = None
    alt: torch.Tensor | None = None  # its answer
    parts: tuple[str, ...] | None = None  # the keys it names, where not its key's ("a+b": a and b; "a|b": a tie)
    near: torch.Tensor | None = None  # rows where the function's answer is much nearer this one than the right one
    alt_dead: torch.Tensor | None = None  # the rows that see no key in its answer (or are zeros there)
    supporting: bool = False  # met here only on rows its answer leaves empty: it joins what other cases name

    def consistent(self, done: torch.Tensor | None = None) -> bool:
        """On every row its answer changes (but the rows ``done``, explained by another cause already), the function
        gave it; and on one at least by value, not only as a row that sees no key (the identity, key "", speaks only
        of those rows)."""
        rows = self.differs if done is None else self.differs & ~done
        by_value = rows & self.ok & ~self.used_dead
        return bool(self.ok[rows].all()) and (not self.key or bool(by_value.any()))

    def only_empty(self, done: torch.Tensor | None = None) -> bool:
        """Every row it is met on by value is one its own answer leaves with no key: the function's row is empty
        there too, which every reading that empties that row says alike -- a kernel that stops at an empty packed
        sequence is not one that shifts the queries, though on a case both leave the same rows empty. Such a case
        only joins the reading where other cases name it by their numbers (:data:`attnlab.judge.hint.SUPPORT`)."""
        if not self.key or self.alt_dead is None:
            return False
        rows = self.differs if done is None else self.differs & ~done
        return not bool((rows & self.ok & ~self.used_dead & ~self.alt_dead).any())

    def explains(self, bad: torch.Tensor) -> torch.Tensor:
        """The failing rows it accounts for: where its answer is the function's and differs from the right one (by
        twice the tolerance, or on a row the function fails where the function's answer is far nearer it)."""
        seen = self.differs | self.used_dead
        return bad & self.ok & (seen if self.near is None else seen | self.near)


def rows_err(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """max |a - b| over the last dim, (..., L); NaN counts as infinitely far."""
    d = (a - b).abs()
    return torch.nan_to_num(d, nan=torch.inf).amax(dim=-1)


@dataclass(frozen=True)
class Explained:
    keys: list[str]  # the hints, most failing rows first
    left: torch.Tensor  # (..., L) the failing rows nothing explains
    corrected: torch.Tensor | None  # the output with each explained row's cause taken out (its answer moved onto
    #   the right one's): what is left to test for a cause of another kind (precision); None where rows are left


def explain(out: torch.Tensor, ref: torch.Tensor, limit: float, base: dict, alternatives, mean_v: torch.Tensor,
            dead_ref: torch.Tensor, slack: float = 0.0) -> Explained:
    """What explains ``out``'s failing rows. ``ref`` the right answer, ``limit`` the rule's for the output, ``base``
    the oracle's arguments for the case, ``mean_v`` (..., L, Ev) each row's mean of its values, ``dead_ref`` (..., L)
    the rows that see no key; ``slack``: how far beyond the limit a row may be from an alternative and still be its
    (the error a precision cause may add on top, in half precision)."""
    out = out.detach().double().cpu()
    ev = _Evidence(out, ref, limit, mean_v, slack)
    bad = ev.bad
    if not bad.any():
        return Explained([], bad, out)
    fits = [ev.fit(Alternative("", out=ref), ref, dead_ref)]  # the right answer but for its rows with no key
    fits += [_fit(ev, a, base) for a in alternatives]
    fits = [f for f in fits if f is not None]
    found, left = _greedy(fits, bad)
    if left.any():
        pair = _best_pair(ev, fits, base, left)
        if pair is not None:  # (met only on rows its answer leaves empty -- a shift and its undoing that drop a
            pair.supporting = pair.only_empty(bad & ~left)  # sequence -- it joins what other cases name, as one)
            found.append(pair)
            left = left & ~pair.explains(left)
    if left.sum() > RESIDUE * bad.sum():  # most rows unexplained: a cause that fits a few of them is chance
        found = [f for f in found if f.explains(bad).sum() >= RESIDUE * bad.sum()]
        left = bad.clone()
        for f in found:
            left &= ~f.explains(bad)
    corrected = None if found and left.any() else _corrected(out, ref, found, bad)  # rows left: nothing to test
    return Explained(_keys(found, bad), left, corrected)


def _keys(found: list[_Fit], bad: torch.Tensor) -> list[str]:
    keys: list[str] = []
    for f in found:
        parts = f.parts if f.parts is not None else f.key.split("+") if not tied(f.key) else [f.key]
        keys += [h for h in (tie([k], f.supporting) for k in parts if k) if h not in keys]
        named = [a for a in f.dead_answers if not f.key or a != "nan"]  # NaN under a wrong mask: the mask's doing
        if named and f.used_dead is not None and (f.used_dead & bad).any():
            keys += [k for k in ("dead-rows", *(f"dead-rows={a}" for a in named)) if k not in keys]
    return keys


def _corrected(out: torch.Tensor, ref: torch.Tensor, found: list[_Fit], bad: torch.Tensor) -> torch.Tensor:
    """``out`` with each cause's rows moved by (right answer - the cause's answer): what the function would return
    had it not had that cause, as far as these rows tell."""
    fixed = out.clone()
    for f in found:
        rows = f.explains(bad)
        by_value = rows & ~f.used_dead
        fixed[by_value] = out[by_value] - f.alt[by_value] + ref[by_value]
        fixed[rows & f.used_dead] = ref[rows & f.used_dead]
    return fixed


def _fit(ev: _Evidence, a: Alternative, base: dict) -> _Fit | None:
    try:
        return ev.fit(a, *_answer(a, base))
    except (TypeError, ValueError, RuntimeError, IndexError, KeyError):  # a change these arguments do not take
        return None  # (no mask to invert; two changes that do not compose; a modifier that reads its indices)


def _answer(a: Alternative, base: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    if a.change is None:
        return a.out, None
    return _compute(a.change(dict(base)))


ONLINE = "online"  # a change's mark: the answer an online softmax that skips a rescale gives (hypotheses.online)


def answer(kw: dict) -> tuple[torch.Tensor, oracle.Forward]:
    """The oracle's answer to a changed question (:func:`oracle.answer`'s arguments), where a change asked for an
    online softmax that skips a rescale, that softmax's output on the same (changed) scores and values."""
    if ONLINE not in kw:
        return oracle.answer(**kw)
    from attnlab.judge import hypotheses

    rest = {k: v for k, v in kw.items() if k != ONLINE}
    out, f = oracle.answer(**rest)
    return hypotheses.online(rest, *kw[ONLINE]), f


def _compute(kw: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The oracle's output for these arguments, and its rows that see no key (..., L)."""
    out, f = answer(kw)
    dead = oracle.unflatten(f.P.sum(dim=-1) == 0, f)
    return out, dead


def _greedy(fits: list[_Fit], bad: torch.Tensor) -> tuple[list[_Fit], torch.Tensor]:
    """The consistent alternatives, most failing rows explained first, while one explains a row still left; each
    time the rest is tested again with the rows explained so far set aside (one cause does not hide another)."""
    found, left = [], bad.clone()
    pool = list(fits)
    while left.any() and pool:
        done = bad & ~left
        ready = [f for f in pool if f.consistent(done)]
        best = max(ready, key=lambda f: int(f.explains(left).sum()), default=None)
        if best is None or not best.explains(left).any():
            break
        gained = best.explains(left)
        tied = [f for f in ready if f is not best and f.key and torch.equal(f.explains(left), gained)]
        pool = [f for f in pool if f is not best and not any(f is t for t in tied)]
        empty = best.only_empty(done) and all(f.only_empty(done) for f in tied)
        if tied and best.key:  # the same rows, two readings: the diagnosis settles it from the other cases
            best = _Fit(tie([best.key, *(f.key for f in tied)]), best.differs, best.ok, best.dead_answers,
                        best.used_dead, best.change, best.alt, near=best.near, alt_dead=best.alt_dead)
        best.supporting = empty
        found.append(best)
        left &= ~gained
    return found, left


def _best_pair(ev: _Evidence, fits: list[_Fit], base: dict, left: torch.Tensor) -> _Fit | None:
    """Two changes at once (the second made on top of the first) that explain the rows left, if any pair does; where
    several pairs explain the same rows most, they tie (:func:`_tied_pair`)."""
    best: list[_Fit] = []
    for a, b in _pairs(ev, fits, left):
        both = Alternative(f"{a.key}+{b.key}", change=lambda kw, a=a, b=b: b.change(a.change(kw)))
        fit = _fit(ev, both, base)
        if fit is None or not fit.consistent(~left):
            continue
        n = int(fit.explains(left).sum())
        if n and (not best or n > int(best[0].explains(left).sum())):
            best = [fit]
        elif n and torch.equal(fit.explains(left), best[0].explains(left)):
            best.append(fit)
    return _tied_pair(best)


def _pairs(ev: _Evidence, fits: list[_Fit], left: torch.Tensor):
    """The pairs worth trying, each order once: the alternatives that come closest on the rows left, two at a time,
    and the one that explains most of them with every change that touches the rows it leaves -- a bug that
    alone comes close to no row (its rows are read through the other bug: a causal diagonal placed in keys that
    start a row early) is found only on top of the other, and a pair that another explains alike is told as a
    tie, not named at random."""
    # (an answer of all zeros sees no key, whatever else changes: it pairs with nothing)
    changes = [f for f in fits if f.change is not None and bool(f.alt.abs().amax() > 0)]
    near = sorted(changes, key=lambda f: -int((ev.closer(f) & left).sum()))[:PAIRS]
    near = [f for f in near if (ev.closer(f) & left).any()]
    most = max((int(f.explains(left).sum()) for f in near), default=0)
    tried: set[tuple[int, int]] = set()
    for a in near:
        rest = left & ~a.ok
        widest = most and int(a.explains(left).sum()) == most
        touch = [f for f in changes if widest and f not in near and (f.differs & rest).any()]
        for b in (*near, *touch):
            for x, y in ((a, b), (b, a)):
                if x is not y and (id(x), id(y)) not in tried:
                    tried.add((id(x), id(y)))
                    yield x, y


def _tied_pair(fits: list[_Fit]) -> _Fit | None:
    """Pairs that explain the same rows alike: the causes every one of them has are named, the others tie ("a|b":
    the diagnosis settles it from the function's other cases) -- a causal diagonal aligned top-left sees the same
    slots whether the new keys were written a slot late or not at all."""
    if not fits:
        return None
    sets = list(dict.fromkeys(tuple(dict.fromkeys(f.key.split("+"))) for f in fits))
    common = [k for k in sets[0] if all(k in s for s in sets)]
    rest = list(dict.fromkeys("+".join(k for k in s if k not in common) for s in sets))
    f = fits[0]
    parts = (*common, tie(rest) if all(rest) else "") if len(rest) > 1 else sets[0]  # ("": one has no more)
    if len(rest) > PAIR_READINGS:
        return None  # many changes do it alike on top of the same cause: the rows name none of them
    return _Fit(f.key, f.differs, f.ok, f.dead_answers, f.used_dead, f.change, f.alt, tuple(p for p in parts if p),
                f.near, f.alt_dead)


def _larger(alt: torch.Tensor, ref_max: float) -> float:
    """How many times the right answer's size (``ref_max``: its largest finite magnitude, :func:`_finite_max`) an
    alternative's is, at least 1: the limit is a rounding of the right answer's size, and an answer many times larger
    (the weights a large sink takes from every key given back to them) is rounded in proportion to its own."""
    if ref_max == 0.0:
        return 1.0
    return max(1.0, _finite_max(alt) / ref_max)


def _finite_max(x: torch.Tensor) -> float:
    """The largest magnitude among ``x``'s finite entries; 0 where it has none."""
    x = x.detach().abs()
    return float(torch.where(torch.isfinite(x), x, 0.0).max()) if x.numel() else 0.0


class _Evidence:
    """The function's output beside the right answer, with what fitting an alternative needs."""

    def __init__(self, out: torch.Tensor, ref: torch.Tensor, limit: float, mean_v: torch.Tensor, slack: float = 0.0):
        self.out, self.ref, self.limit, self.tol = out, ref, limit, limit + slack
        self.ref_max = _finite_max(ref)  # the right answer's size, for every alternative's limit (_larger)
        self.bad = rows_err(out, ref) > limit  # (..., L)
        self.nan = ~torch.isfinite(out).any(dim=-1)  # rows wholly NaN or infinite
        tol = max(self.tol, 1e-3 * float(mean_v.abs().max()) if mean_v.numel() else 0.0)
        self.mean = torch.isfinite(out).all(dim=-1) & (rows_err(out, mean_v) <= tol)

    def fit(self, a: Alternative, alt: torch.Tensor | None, dead: torch.Tensor | None) -> _Fit | None:
        if alt is None or alt.shape != self.out.shape:
            return None
        tol = self.tol * _larger(alt, self.ref_max)
        differs = rows_err(alt, self.ref) > 2 * tol
        ok = rows_err(self.out, alt) <= tol
        used = torch.zeros_like(ok)
        answers = []
        if dead is not None and not bool(self.nan.all()):  # an answer wholly NaN says nothing of its dead rows
            for name, rows in (("nan", self.nan), ("mean", self.mean)):
                hit = dead & rows & ~ok
                if hit.any():
                    answers.append(name)
                    used |= hit
        near = rows_err(self.out, alt) <= CLOSER * rows_err(self.out, self.ref)
        # a row the answer leaves at zero (no key, or keys whose values are zero: a page of a paged probe no key of
        # the spec's is on) tells no more than an empty row does: met only there, the reading only supports
        zero = torch.nan_to_num(alt.abs(), nan=1.0).amax(dim=-1) <= tol
        empty = zero if dead is None else dead | zero
        return _Fit(a.key, differs, ok | used, answers, used, a.change, alt, near=near, alt_dead=empty)

    def closer(self, f: _Fit) -> torch.Tensor:
        """Rows where the alternative's answer is much nearer the function's than the right answer is."""
        return rows_err(self.out, f.alt) <= CLOSER * rows_err(self.out, self.ref)
