"""Run the corpus of wrong attention functions (tests/mutants.py) and the right ones through verify: one result.

Each mutant runs on the quick grid in the dtypes that show its bug, the right functions in every dtype;
the oracle's work is shared by every function on a case. Used by tests/judge/test_verify_corpus.py and by
benchmarks/verify_corpus.py (more seeds).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.judge import diagnose, registry, verify
from tests import mutants
from tests.helpers import named

ALL = ("float32", "float64", "bfloat16")


NOT_CAUSES = registry.NAMES_NOTHING  # what happened, or what the failing cases share: no cause


@dataclass
class Outcome:
    name: str
    want: str | tuple | None  # the diagnosis key that states the cause (a tuple: one per bug; None: no one cause)
    killed: bool
    counts: dict
    keys: list[str]  # the diagnoses, most likely first

    @property
    def bugs(self) -> tuple[str, ...]:
        return mutants.bugs(self.want)

    @property
    def first(self) -> bool:
        """A single bug named by the first line; several bugs: every one among the lines."""
        if len(self.bugs) == 1:
            return bool(self.keys) and self.keys[0] == self.bugs[0]
        return self.named

    @property
    def named(self) -> bool:
        return bool(self.bugs) and all(b in self.keys for b in self.bugs)

    @property
    def false(self) -> list[str]:
        """Lines that name a cause the function does not have (none counted where its cause is unknown)."""
        if not self.bugs:
            return []
        ok = mutants.allowed(self.want)
        return [k for k in self.keys if k not in ok and k not in NOT_CAUSES]


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
                            named(diagnose.diagnose(result, name)))
    return result, out


def table(outcomes: dict) -> str:
    lines = [f"{'KILLED' if o.killed else 'ALIVE '}  {o.name[:42]:42s} "
             f"{o.counts['fail'] + o.counts['error']:3d} failing  want {'+'.join(o.bugs) or '-':16s} "
             f"got {', '.join(o.keys)}" + (f"  FALSE {o.false}" if o.false else "")
             for o in outcomes.values()]
    single = [o for o in outcomes.values() if len(o.bugs) == 1]
    multi = [o for o in outcomes.values() if len(o.bugs) > 1]
    lines.append(f"killed {sum(o.killed for o in outcomes.values())} of {len(outcomes)}; single bugs named first "
                 f"{sum(o.first for o in single)} of {len(single)}, among the lines {sum(o.named for o in single)}; "
                 f"several bugs all among the lines {sum(o.named for o in multi)} of {len(multi)}; false lines "
                 f"{sum(len(o.false) for o in outcomes.values())}")
    return "\n".join(lines)
