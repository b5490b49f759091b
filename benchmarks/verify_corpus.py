"""verify against the corpus of wrong attention functions, at several seeds: kills, diagnoses, the oracle's check.

    .venv/bin/python benchmarks/verify_corpus.py [--seeds 0:5] [--out DIR]

The corpus is tests/mutants.py: each function one bug people write (the scale, masks, causal
alignment, dead rows, GQA head mapping, dropout scaling, detached inputs, a broken custom backward,
online-softmax rescaling, dropped tail tiles, precision, layout), and three right functions
(PyTorch's own, a float64-inside one, a tiled online softmax). At each seed every mutant runs on the
quick grid in the dtypes that show its bug, the right ones in every dtype (tests/corpus.py). Prints
the table per seed and writes DIR/verify_corpus.json: per seed, how many mutants verify failed, for
how many the right cause was the first diagnosis and among the diagnoses, whether every right
function passed, the worst float64 disagreement between PyTorch and the oracle, and the seconds.
Exit code 1 when a mutant survived or a right function failed at any seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: the corpus is tests.corpus

from attnlab.results import machine, versions  # noqa: E402
from tests import corpus, mutants  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0:5", help="a range a:b of seeds (default 0:5)")
    p.add_argument("--out", default="attnlab-out")
    args = p.parse_args(argv)
    a, _, b = args.seeds.partition(":")
    runs, ok = [], True
    for seed in range(int(a), int(b)):
        t0 = time.perf_counter()
        result, out = corpus.run(seed=seed)
        seconds = time.perf_counter() - t0
        print(f"seed {seed} ({seconds:.0f} s)\n{corpus.table(out)}", flush=True)
        right = {n: all(r.status in ("pass", "skipped") for r in result.rows if r.form == n) for n in mutants.CORRECT}
        single = [o for o in out.values() if len(o.bugs) == 1]
        multi = [o for o in out.values() if len(o.bugs) > 1]
        w = result.worst_cross()
        killed = sum(o.killed for o in out.values())
        runs.append({"seed": seed, "seconds": seconds, "mutants": len(out), "killed": killed,
                     "single_bug": len(single), "single_named_first": sum(o.first for o in single),
                     "multi_bug": len(multi), "multi_all_named": sum(o.named for o in multi),
                     "false_lines": sum(len(o.false) for o in out.values()), "right_functions_pass": right,
                     "worst_cross": w and w.to_dict(),
                     "outcomes": {n: {"killed": o.killed, "want": o.want, "got": o.keys} for n, o in out.items()}})
        ok &= runs[-1]["killed"] == len(out) and all(right.values())
    path = Path(args.out) / "verify_corpus.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), "versions": versions(), "runs": runs}, indent=2) + "\n")
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
