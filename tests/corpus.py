"""Run the corpus of wrong attention functions (tests/mutants.py) and the right ones through verify: one result.

Each mutant runs on the quick grid in the dtypes that show its bug, the right functions in every dtype;
the oracle's work is shared by every function on a case. Used by tests/lab/check/test_verify_corpus.py and by
benchmarks/verify_corpus.py (more seeds).
"""

from __future__ import annotations

from dataclasses import dataclass

import mutants
from attnlab.lab.check import diagnose, verify

ALL = ("float32", "float64", "bfloat16")


@dataclass
class Outcome:
    name: str
    want: str | None  # the diagnosis key that states the cause
    killed: bool
    counts: dict
    keys: list[str]  # the diagnoses, most likely first

    @property
    def first(self) -> bool:
        return bool(self.keys) and self.keys[0] == self.want

    @property
    def named(self) -> bool:
        return self.want in self.keys


def run(seed: int = 0, timeout: float | None = None):
    """(result, {mutant: Outcome}): every row of every function, and what became of each mutant."""
    rows = []
    for dt in ALL:
        targets = {n: f for n, (f, _, dts) in mutants.MUTANTS.items() if dt in dts} | dict(mutants.CORRECT)
        rows += verify.verify(targets, verify.default_cases([dt], long=False), seed=seed, timeout=timeout).rows
    result = verify.VerifyResult(rows, {}, {})
    out = {}
    for name, (_, want, _) in mutants.MUTANTS.items():
        mine = [r for r in rows if r.form == name]
        counts = {s: sum(r.status == s for r in mine) for s in ("pass", "fail", "error", "skipped")}
        out[name] = Outcome(name, want, counts["fail"] + counts["error"] > 0, counts,
                            [d.key for d in diagnose.diagnose(result, name)])
    return result, out


def table(outcomes: dict) -> str:
    lines = [f"{'KILLED' if o.killed else 'ALIVE '}  {o.name:42s} {o.counts['fail'] + o.counts['error']:3d} failing  "
             f"want {str(o.want):16s} got {', '.join(o.keys[:3])}" for o in outcomes.values()]
    with_cause = [o for o in outcomes.values() if o.want]
    lines.append(f"killed {sum(o.killed for o in outcomes.values())} of {len(outcomes)}; the right cause named first "
                 f"for {sum(o.first for o in with_cause)} of {len(with_cause)}, among the lines for "
                 f"{sum(o.named for o in with_cause)}")
    return "\n".join(lines)
