"""Run a corpus written blind (tests/unseen/<set>/) through the judge: each kernel's verdict and its lines.

A corpus folder holds ``kernels/<api>/<name>.py`` (a function ``kernel`` written to that API; a corpus of kernels
alone, as tests/unseen/sinks, holds ``<api>/<name>.py`` at its root) and ``slips/level-N/<name>.py`` (a learner's
file for level N), each with its truth in a ``TRUTH`` dict: the API or level, the bugs in its writer's words, and
its kind ("semantic", "precision", "two", "correct"). The files are read as text and loaded by path (no package
imports), so a folder of them is all a corpus is.

    .venv/bin/python -m tests.unseen.run dev|held|sinks [--only NAME[,NAME]] [--json PATH]

prints, for each kernel, whether it was failed and the lines the judge said (the key and the words), and writes the
rows as JSON (the grading against the truths is a reader's: see tests/unseen/grade.py).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
APIS = ("sdpa", "flash-attn", "flash-attn-varlen", "paged-decode", "flex")
DTYPES = ("float32", "float64", "bfloat16")


@dataclass
class Entry:
    path: Path
    api: str  # an API, or "level-N"
    bugs: list[str]
    kind: str
    name: str = field(init=False)

    def __post_init__(self):
        self.name = f"{self.path.parent.name}/{self.path.stem}"


def truth(path: Path) -> dict:
    """The file's TRUTH dict, read from its source (nothing of the file runs)."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TRUTH" for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError(f"{path}: no TRUTH")


def entries(corpus: str, part: str = "kernels") -> list[Entry]:
    """The corpus's files of ``part``; a corpus of kernels alone (tests/unseen/sinks) holds its API folders at
    its root."""
    root = HERE / corpus / part
    if part == "kernels" and not root.is_dir():
        root = HERE / corpus
    out = []
    for path in sorted(root.glob("*/*.py")):
        if path.name == "__init__.py":
            continue
        t = truth(path)
        out.append(Entry(path, t["api"], list(t.get("bugs", t.get("slips", []))), t["kind"]))  # (a learner's: slips)
    return out


def load(path: Path, name: str = "kernel"):
    spec = importlib.util.spec_from_file_location(f"unseen_{path.parent.name}_{path.stem}".replace("-", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def judge_kernel(e: Entry, seed: int = 0) -> dict:
    """verify on the kernel's API's quick grid (the cases the API can express), in float32, float64 and bfloat16,
    gradients where the API has a backward; dropout left out."""
    from attnlab.judge import apis, diagnose, verify

    fn = load(e.path)
    target = fn if e.api == "sdpa" else apis.Adapted(fn, e.api)
    cases = [c for c in apis.cases(e.api, DTYPES, long=False) if e.api == "sdpa" or not apis.skip_reason(c)]
    backward = e.api in ("sdpa", "flash-attn", "flash-attn-varlen")
    t0 = time.perf_counter()
    r = verify.verify({e.name: target}, cases, seed=seed, timeout=30.0, check_dropout=False, backward=backward)
    lines = diagnose.diagnose(r, e.name)
    return {"name": e.name, "api": e.api, "kind": e.kind, "bugs": e.bugs, "failed": not r.passed,
            "counts": r.counts(), "lines": [[d.key, d.text, *d.measured[:1]] for d in lines],
            "failing": sorted({x.case for x in r.rows if x.status in ("fail", "error")}),
            "seconds": time.perf_counter() - t0}


def judge_slip(e: Entry, seed: int = 0) -> dict:
    """A learner's file of level N, judged as `lab check` judges it (its grading on small cases, the level's slips
    and verify's lines; no time or memory measured: tests/lab/blind_measure.py)."""
    from attnlab.lab import levels
    from tests.lab import blind_measure

    level = levels.LEVELS[int(e.api.split("-")[1]) - 1]
    t0 = time.perf_counter()
    found, passed = blind_measure.first_diagnoses(level.name, e.path, seed)
    return {"name": e.name, "api": e.api, "kind": e.kind, "bugs": e.bugs, "failed": not passed, "counts": {},
            "lines": [[d.key, d.text, *getattr(d, "measured", [])[:1]] for d in found],
            "seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("corpus", help="a folder of tests/unseen: dev, held, held2, sinks")
    p.add_argument("--only", default="", help="names (api/file) to run, comma-separated; substrings match")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slips", action="store_true", help="the learners' files (slips/level-N) instead of the kernels")
    args = p.parse_args(argv)
    if args.slips:  # level 7's kernels run in Triton's interpreter on a CPU (set before triton is imported)
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    torch.set_num_threads(1)
    only = [s for s in args.only.split(",") if s]
    rows = []
    for e in entries(args.corpus, "slips" if args.slips else "kernels"):
        if only and not any(s in e.name for s in only):
            continue
        row = (judge_slip if args.slips else judge_kernel)(e, args.seed)
        rows.append(row)
        mark = "FAILED" if row["failed"] else "passed"
        print(f"{mark}  {e.name}  [{e.kind}] ({row['seconds']:.0f} s)")
        for b in e.bugs:
            print(f"    truth: {b}")
        for key, text, *shown in row["lines"]:
            print(f"    {key}: {text}")
            for m in shown:
                print(f"        {m}")
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
