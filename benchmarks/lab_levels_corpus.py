"""The lab's levels against their mutants, at several seeds: is each slip named first, and the solutions left alone?

    .venv/bin/python benchmarks/lab_levels_corpus.py [--seeds 0:5] [--out DIR]

The corpus is tests/lab/level_solutions.py: each level's solution and each slip a learner
makes in it (level 1 loops and 2 matrix: √S for √d, the softmax over the queries, the weights never
normalised, a loop that peeks one key ahead, the mask turned round, and the older ones; level 4 the
online softmax's four; 5 the backward's three and autograd; 6 the cache's two; 3 the module's three),
named as `attnlab lab check` names them (tests/lab/level_corpus.py). Prints a line per
level and seed and writes DIR/lab_levels_corpus.json. Exit code 1 when a slip is not named first or a
solution gets a diagnosis (or fails).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: the tests' corpus is tests.*

from attnlab.results import machine, versions  # noqa: E402
from tests.lab import level_corpus  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0:5", help="a range a:b of seeds (default 0:5)")
    p.add_argument("--out", default="attnlab-out")
    args = p.parse_args(argv)
    a, _, b = args.seeds.partition(":")
    rows, t0 = [], time.perf_counter()
    for level in level_corpus.S.SLIPS:
        for seed in range(int(a), int(b)):
            t = time.perf_counter()
            got = level_corpus.run([seed], [level])
            rows += got
            bad = [f"{r['slip'] or 'solution'} -> {r['named'][:1] or 'nothing'}" for r in got if not r["right"]]
            print(f"{level:<9} seed {seed}: {sum(r['right'] for r in got)}/{len(got)} right"
                  f" ({time.perf_counter() - t:.1f} s)" + (f"  WRONG: {'; '.join(bad)}" if bad else ""))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "lab_levels_corpus.json"
    path.write_text(json.dumps({"rows": rows, "seconds": time.perf_counter() - t0, "machine": machine(),
                                "versions": versions()}, indent=1))
    print(f"{sum(r['right'] for r in rows)}/{len(rows)} right in {time.perf_counter() - t0:.0f} s; wrote {path}")
    return 0 if all(r["right"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
