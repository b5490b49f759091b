"""One table of what attention code gets wrong: the judge's causes and the lab's slips, each by its key.

An entry holds the words for a kernel author (the judge's line, :func:`attnlab.judge.causes.table`), the words for
a learner (each lab level's line, its ``TEXT``), and how it is detected:

* ``contract`` -- a check on each call's own result (its type, shape, dtype, device, an input changed in place,
  gradients that do not flow, an lse that does not come back);
* ``process`` -- what the judged process did (raised, exited, ended, did not answer in time), or the oracle's own
  disagreement with PyTorch;
* ``semantics`` -- a wrong semantics computed on the failing case's own inputs, whose output the function's output
  is (:mod:`attnlab.judge.hypotheses`; the hint keys it says are listed), checked by :mod:`attnlab.judge.readings`;
* ``tags`` -- the failing cases share a tag no other reading explains ("only GQA cases fail");
* ``precision`` -- a precision model fitted to the quantities and dtypes that fail (:mod:`attnlab.judge.precision`),
  or the error past ``--max-ratio`` times PyTorch's;
* ``shared`` -- what the failing cases share when no reading fits them (only gradients, only the lse, precision lost
  and not placed, no single pattern): these, and an exception's line, name no cause (:data:`NAMES_NOTHING`);
* ``slip`` -- a lab level's slip: its answer on the level's probes, which the learner's outputs must say and fit
  (:mod:`attnlab.judge.readings`, the same rule as ``semantics``);
* ``level`` -- a lab level's own measurement (memory growth, the work a causal forward skips, the lse it returns).

Every entry has a fixture a test holds named first: the judge's in tests/judge/cause_fixtures.py
(tests/judge/test_cause_table.py), the lab's slips their own wrong answers (tests/lab/test_levels.py);
tests/judge/test_registry.py holds that none is missing. ``attnlab verify --causes`` prints the table.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

CONTRACT = ("not-a-tensor", "shape", "dtype", "device", "in-place", "requires-grad", "no-grad", "no-lse",
            "no-grad-output", "inference-mode-output", "no-grad-in-place", "inference-mode-in-place",
            "no-grad-raises", "inference-mode-raises")
PROCESS = ("oracle", "exit", "ended", "hangs", "raises")
SHARED = ("gradients-only", "lse-only", "unclear", "precision-unplaced")
# lines that name no cause: what happened (an exception) or what the failing cases share -- never a false line
NAMES_NOTHING = ("raises", *SHARED)


@dataclass(frozen=True)
class Entry:
    key: str
    author: str | None = None  # the judge's line for a kernel author (None: the lab alone says it)
    learner: dict[str, str] = field(default_factory=dict)  # level name -> the lab's line for a learner there
    detectors: tuple[str, ...] = ()  # how it is read (see the module's notes), one per side that says it
    hints: tuple[str, ...] = ()  # the wrong semantics a "semantics" detector computes
    levels: tuple[str, ...] = ()  # the lab levels whose slips hold this key


def _judge_detector(c) -> str:
    from attnlab.judge import precision

    if c.key in CONTRACT:
        return "contract"
    if c.key in PROCESS:
        return "process"
    if c.key in SHARED:
        return "shared"
    if c.key in (*precision.CAUSES, "precision", "over-ratio"):
        return "precision"
    if c.tags and not c.hints:
        return "tags"
    return "semantics"


def _slip_keys(mod) -> set[str]:
    fn = getattr(mod, "slip_list", None)
    if fn is None:
        return set()
    entries = fn(0) if inspect.signature(fn).parameters else fn()
    keys: set[str] = set()
    for key, _ in entries:
        keys.update(key if isinstance(key, tuple) else (key,))
    return keys


@functools.cache
def table() -> dict[str, Entry]:
    """Every key the judge or a lab level can say, with its words for each reader and its detectors."""
    from attnlab.judge import causes
    from attnlab.lab import levels
    from attnlab.lab.levels import slips

    judge = causes.table()
    learner: dict[str, dict[str, str]] = {}
    slipped: dict[str, list[str]] = {}
    for lv in levels.LEVELS:
        mod = lv.module()
        for key, text in getattr(mod, "TEXT", slips.TEXT).items():
            learner.setdefault(key, {})[lv.name] = text
        for key in _slip_keys(mod):
            slipped.setdefault(key, []).append(lv.name)
    out = {}
    for key in sorted({*judge, *learner}):
        c = judge.get(key)
        det = ([_judge_detector(c)] if c else []) + (["slip"] if key in slipped else
                                                      ["level"] if key in learner else [])
        out[key] = Entry(key, c.text if c else None, learner.get(key, {}), tuple(dict.fromkeys(det)),
                         tuple(c.hints) if c else (), tuple(slipped.get(key, ())))
    return out


def rows() -> list[tuple[str, str, str, str]]:
    """The table as text rows: key, detectors, the author's line, the learner's line (its levels)."""
    out = []
    for e in table().values():
        said = dict.fromkeys(e.learner.values())
        learner = " | ".join(f"{t} ({', '.join(lv for lv, x in e.learner.items() if x == t)})" for t in said)
        out.append((e.key, ", ".join(e.detectors), e.author or "-", learner or "-"))
    return out
