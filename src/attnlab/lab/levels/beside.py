"""A second slip beside the one named: the designed cases where the learner's output is not that slip's answer.

A slip is named from the level's probes (:mod:`.slips`): on every one, the learner's output is the slip's
answer. The grid's cases ask more than the probes do -- values wider or narrower than the keys, one query, two
batch dimensions, float32 and bfloat16 -- and a second slip can show only there, where the first already fails
every case and no tag of verify's can read it. So, once a slip is named, the learner's function answers a few
more designed cases (:data:`CASES`, in its own process as the probes are), and each answer is set beside the named
slip's own answer on the same inputs, computed here: where the two differ by more than the reading rule's
tolerance allows, the learner's output is not that slip's answer there -- a fact of its outputs, not a guess. The
line says which cases those are and what they share that the others lack (the tag a cause reads), or, where they
share nothing, how many and one of them. Nothing is named that the outputs do not show.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnlab.judge import Case, Diagnosis, rule
from attnlab.judge import causes as C
from attnlab.judge import verify as V

from . import slips

APART = 4.0  # an answer this many reading tolerances from the slip's is not the slip's (within one it is)
CASES = (  # what the grid asks beyond the probes, each at a probe's size; float64 stands for the level's dtype
    Case("beside: values wider than the keys (Ev = 16, E = 8)", batch=(1,), H=2, L=20, E=8, Ev=16, is_causal=True,
         dtype="float64"),
    Case("beside: values narrower than the keys (Ev = 8, E = 16)", batch=(1,), H=2, L=20, E=16, Ev=8,
         is_causal=True, dtype="float64"),
    Case("beside: one query, 19 keys", batch=(1,), H=2, L=1, S=19, E=8, is_causal=True, dtype="float64"),
    Case("beside: two batch dimensions", batch=(2, 3), H=2, L=9, E=8, is_causal=True, dtype="float64"),
    Case("beside: float32", batch=(1,), H=2, L=20, E=8, is_causal=True, dtype="float32"),
    Case("beside: bfloat16", batch=(1,), H=2, L=20, E=8, is_causal=True, dtype="bfloat16"),
)
WORDS = {  # the tags a case here has, in the learner's terms
    "Ev!=E": "the values are not as wide as the queries and keys (Ev != E)", "L=1": "one query (L = 1)",
    "L!=S": "the queries and keys differ in number (L != S)", "upper-left L!=S": "causal with L != S",
    "batch-dims": "the leading dimensions are not one batch dimension", "bfloat16": "the inputs are bfloat16",
    "float32": "the inputs are float32", "float64": "the inputs are float64",
}


def cases(probes) -> tuple[Case, ...]:
    """:data:`CASES` in the level's own dtype (its first probe's: float64 where the level takes it; where that is
    float32, the float32 case asks float16 instead), four times as wide and 32 long where every probe is 16 wide or
    more (a Triton kernel's tiles: tl.dot takes 16 at least, a learner's kernel may hold one tile width for both, and
    a slip of its tiles is computed on whole tiles of 32)."""
    dtype, wide = probes[0].dtype, 4 if min(c.E for c in probes) >= 16 else 1
    out = []
    for c in CASES:
        if wide > 1 and c.L == 1:  # (a slip of the tiles is modelled on whole tiles: one query is none)
            continue
        c = replace(c, dtype=dtype) if c.dtype == "float64" else replace(
            c, name="beside: float16", dtype="float16") if c.dtype == dtype else c
        c = replace(c, E=c.E * wide, Ev=c.Ev and c.Ev * wide, L=c.L if c.L == 1 else 32, name=c.name.replace(
            f"Ev = {c.Ev}, E = {c.E}", f"Ev = {(c.Ev or 0) * wide}, E = {c.E * wide}")) if wide > 1 else c
        out.append(c)
    return tuple(out)


def second(got, probes, seed: int, fitted, said: list[Diagnosis]) -> list[Diagnosis]:
    """The lines for what the learner's answers on ``probes`` (:func:`cases`; ``got``: :func:`.slips.answers`' reply)
    show beside the slip(s) ``fitted`` the level's probes named (``slip(q, k, v, causal)``), or [] where every
    answer is a fitted slip's (or too few can be set beside one): its output, then its lse where the level returns
    one. ``said``: the lines already said."""
    from .own import unpack

    if not fitted:
        return []
    seen: dict[str, tuple[list, list]] = {"out": ([], []), "lse": ([], [])}
    for i, (case, g) in enumerate(zip(probes, got, strict=True)):
        if g is None:
            continue
        x = V.inputs(case, seed + i)
        for quantity, gap in _gaps(case, x, {q: unpack(t).double() for q, t in g.items()}, fitted).items():
            seen[quantity][gap == 0].append((case, gap))
    out = _line("output", *seen["out"], said)
    apart, alike = seen["lse"]
    if out or not apart or any(c.name == case.name for case, _ in seen["out"][0] for c, _ in apart):
        return out  # (an lse set apart where the output is too says nothing the output's line does not)
    return _line("lse", apart, alike, said, every=True)


def _line(what: str, apart: list, alike: list, said: list[Diagnosis], every: bool = False) -> list[Diagnosis]:
    if not apart or (len(alike) < 2 and not (every and not alike)):
        return []
    tag = _shared([c for c, _ in apart], [c for c, _ in alike]) if alike else None
    rest: list = []
    if alike and not tag:  # no one thing all share: the one most of them share that none alike has, the rest by name
        tag, rest = _most(apart, alike)
    key = C.of_tag(tag) if tag else "measured:lse" if what == "lse" else None
    if key is not None and key in {d.key for d in said}:
        return []
    case, g = max(apart, key=lambda x: x[1])
    where = (f"the case(s) where {WORDS.get(tag, tag)}, and none of the {len(alike)} where it is the slip's"
             if tag else "every one of them" if not alike else
             f"they share no one thing the {len(alike)} where it is the slip's lack")
    if rest:
        where += f" (and {', '.join(repr(c.name) for c in rest)}, which {'has' if len(rest) == 1 else 'have'} not that)"
    text = (f"and something beside it: on {len(apart)} of {len(apart) + len(alike)} more cases the check tried, your "
            f"{what} is not that slip's (up to {g:.2g} from it, e.g. '{case.name}') -- {where}: there your function "
            "does something the slip alone does not (a second slip, or this one taken another way at those shapes)")
    return [Diagnosis(key or "measured:beside", text, len(apart), sorted({c.dtype for c, _ in apart}), case.name)]


def _gaps(case, x, mine: dict, fitted) -> dict[str, float]:
    """Per quantity the learner gave (out, lse): 0 where it is a fitted slip's answer (within the reading
    tolerance), its distance from the nearest where it is clearly none's (past :data:`APART` tolerances); left out
    where no slip answers it, or where it is neither clearly."""
    right = slips.answer(case, x.q, x.k, x.v)
    gaps: dict[str, list] = {}
    for slip in fitted:
        try:
            alt = slip(x.q, x.k, x.v, case.is_causal)
        except (RuntimeError, ValueError, IndexError):
            continue
        alt = alt if isinstance(alt, dict) else {"out": alt}
        for q in ("out", "lse"):
            a, m = alt.get(q), mine.get(q)
            if isinstance(a, torch.Tensor) and isinstance(m, torch.Tensor) and a.shape == m.shape:
                gaps.setdefault(q, []).append(_distance(case, m, a.double(), right[q]))
    out = {}
    for q, ds in gaps.items():
        if any(d <= tol for d, tol in ds):
            out[q] = 0.0
        elif all(d > APART * tol for d, tol in ds):
            out[q] = min(d for d, _ in ds)
    return out


def _distance(case, mine, alt, right) -> tuple[float, float]:
    """(max |mine - alt|, the reading tolerance there): infinite where one is finite and the other is not."""
    if not torch.equal(torch.isfinite(alt), torch.isfinite(mine)):
        return float("inf"), 1.0
    both = torch.isfinite(alt)
    if not both.any():
        return 0.0, 1.0
    return float((mine - alt)[both].abs().max()), rule.reading_tolerance(case.dtype, alt[both], right[both])


def _most(apart, alike) -> tuple[str | None, list]:
    """(tag, the cases apart without it): the tag of a cause the most cases apart share, two at least and more than
    half, that no case alike has; (None, []) where none does."""
    cases = [c for c, _ in apart]
    others = set().union(*(set(c.tags) for c, _ in alike))
    counts: dict[str, int] = {}
    for c in cases:
        for t in set(c.tags) - others:
            if C.of_tag(t):
                counts[t] = counts.get(t, 0) + 1
    best = sorted(counts.items(), key=lambda tn: (-tn[1], tn[0] not in WORDS, tn[0]))
    if not best or best[0][1] < 2 or 2 * best[0][1] <= len(cases):
        return None, []
    return best[0][0], [c for c in cases if best[0][0] not in c.tags]


def _shared(apart, alike) -> str | None:
    """The tag every case set apart has and no case alike has (of the tags a cause reads), in :data:`WORDS` first."""
    tags = set.intersection(*(set(c.tags) for c in apart)) - set().union(*(set(c.tags) for c in alike))
    named = sorted((t for t in tags if C.of_tag(t)), key=lambda t: (t not in WORDS, t))
    return named[0] if named else None
