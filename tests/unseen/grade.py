"""Grade a blind corpus's run (tests/unseen/run.py's JSON) against the labels set down from its truths.

    .venv/bin/python -m tests.unseen.grade RUN.json dev

For each file: whether it was failed, whether its bug's line came first (one bug) or each bug is among the lines
(two), and its false lines (a key neither its labels nor its ALSO nor NEUTRAL hold). Prints a row per file and the
table of counts per API and kind. With ``--check``, exit code 1 when the issue's bars are not met (:func:`shortfalls`):
single bugs named first >= 85 %, both bugs of two-bug files >= 85 %, precision bugs >= 80 %, no false line, no
correct file failed; a wrong file of the corpus with no label, or a label with no file, is a shortfall too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict

from tests.unseen import labels as L


def grade(rows: list[dict], table: dict, also: dict) -> list[dict]:
    out = []
    for r in rows:
        name, bugs = r["name"], table.get(r["name"], [])
        keys = [line[0] for line in r["lines"]]
        base = [k.split("@")[0] for k in keys]
        wanted = [set(b) for b in bugs]
        ok = set().union(*wanted) if wanted else set()
        false = [k for k in base if k not in ok and k not in also.get(name, set()) and k not in L.NEUTRAL
                 and not k.startswith("measured:")]
        if r["kind"] == "correct":
            verdict = "right" if not r["failed"] else "FAILED A RIGHT ONE"
            named = not r["failed"]
        elif not r["failed"]:
            verdict, named = "not failed", False
        elif len(wanted) == 1:
            first = next((k for k in base if k not in L.NEUTRAL or k in wanted[0]), None)
            named = first in wanted[0] if first else False
            verdict = "named first" if named else "not first"
        else:
            named = all(any(k in w for k in base) for w in wanted)
            verdict = "all named" if named else "not all named"
        out.append({"name": name, "api": r["api"], "kind": r["kind"], "verdict": verdict, "named": named,
                    "false": false, "keys": base, "failing": r.get("failing", [])})
    return out


def table(graded: list[dict]) -> str:
    by = defaultdict(Counter)
    for g in graded:
        c = by[(g["api"], g["kind"])]
        c["n"] += 1
        c["named"] += g["named"]
        c["false"] += len(g["false"])
    lines = [f"{'api':20s} {'kind':10s} {'files':>5s} {'named':>6s} {'false lines':>11s}"]
    tot = Counter()
    for (api, kind), c in sorted(by.items()):
        lines.append(f"{api:20s} {kind:10s} {c['n']:5d} {c['named']:6d} {c['false']:11d}")
        tot.update(c)
    for kind in ("semantic", "two", "precision", "correct"):
        k = Counter()
        for (_, kd), c in by.items():
            if kd == kind:
                k.update(c)
        if k["n"]:
            lines.append(f"{'all':20s} {kind:10s} {k['n']:5d} {k['named']:6d} {k['false']:11d}")
    lines.append(f"{'all':20s} {'all':10s} {tot['n']:5d} {tot['named']:6d} {tot['false']:11d}")
    return "\n".join(lines)


BARS = {"semantic": 0.85, "two": 0.85, "precision": 0.80}


def shortfalls(graded: list[dict], table_: dict | None = None) -> list[str]:
    """What keeps the graded run from the bars (empty: it meets them)."""
    out = []
    if table_ is not None:
        names = {g["name"] for g in graded}
        out += [f"no label for {n}" for n in sorted({g["name"] for g in graded if g["kind"] != "correct"}
                                                    - set(table_))]
        out += [f"a label for {n}, which the run did not judge" for n in sorted(set(table_) - names)]
    for kind, bar in BARS.items():
        rows = [g for g in graded if g["kind"] == kind]
        if rows and sum(g["named"] for g in rows) < bar * len(rows):
            out.append(f"{kind}: {sum(g['named'] for g in rows)} of {len(rows)} named, under {bar:.0%}")
    out += [f"false line in {g['name']}: {', '.join(g['false'])}" for g in graded if g["false"]]
    out += [f"a correct file failed: {g['name']}" for g in graded if g["kind"] == "correct" and not g["named"]]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run")
    p.add_argument("corpus", choices=("dev", "held", "held2", "held3", "held4", "held5", "held5-after", "sinks",
                                      "dev-slips", "held-slips", "held2-slips", "held3-slips", "held4-slips",
                                      "held5-slips", "held5-slips-after", "held6", "held6-slips", "held7",
                                      "held7-slips", "held8", "held8-slips", "held8-after", "held8-slips-after",
                                      "held9", "held9-slips", "held9-after", "held9-slips-after", "held10",
                                      "held10-slips", "held10-after", "held10-slips-after", "held7-after",
                                      "held7-slips-after", "held11", "held11-slips"))
    p.add_argument("--check", action="store_true", help="exit 1 when the bars are not met (listed)")
    args = p.parse_args(argv)
    with open(args.run) as f:
        rows = json.load(f)
    tab = getattr(L, args.corpus.upper().replace("-", "_"))
    also = getattr(L, f"{args.corpus.upper().replace('-', '_')}_ALSO", {})
    graded = grade(rows, tab, also)
    for g in graded:
        print(f"{g['verdict']:18s} {g['name']:60s} {', '.join(g['keys'][:4])}" + (f"  FALSE {g['false']}"
                                                                                   if g["false"] else ""))
    print(table(graded))
    if args.check:
        short = shortfalls(graded, tab)
        for line in short:
            print("short:", line)
        return 1 if short else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
