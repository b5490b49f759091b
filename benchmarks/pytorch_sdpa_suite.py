"""PyTorch's own SDPA tests, run with F.scaled_dot_product_attention replaced by each attnlab form.

    .venv/bin/python benchmarks/pytorch_sdpa_suite.py PATH/test_transformers.py
        [--forms torch,sdpa,matrix,flash,loops,triton] [-k EXPR] [--quick] [--out DIR] [--timeout S]

PATH is PyTorch's ``test/test_transformers.py`` (not shipped with torch; torch.testing._internal
needs expecttest, which the dev extra installs). Each form runs the selected CPU tests in a pytest process
of its own, through benchmarks/sdpa_suite_plugin.py, which swaps the function in before the file is
imported. ``torch`` is PyTorch unpatched, the baseline: a test that fails there (the file may be older
or newer than the installed torch) says nothing about a form. ``sdpa`` is attnlab's own registration
of PyTorch's function, a control for the argument checks. ``loops`` gets calls up to --loops-work
query-key pairs, ``triton`` (Triton's interpreter) up to its interpreter budget; larger calls skip.

Where a test compares F.sdpa under one backend with F.sdpa under another, both sides are the form.
The default selection is the SDPA classes and TestTransformers' scaled_dot_product / MultiheadAttention
/ is_causal tests; torch.compile tests and CUDA-only tests are left out.

Writes DIR/pytorch_sdpa_suite.json (per form: passed / failed / skipped counts, each non-passing test
with its first line, and the tests that pass with torch but not with the form) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnlab.kernels.flash_triton import INTERPRETER_MAX_WORK
from attnlab.results import machine, versions

HERE = Path(__file__).resolve().parent
SELECT = ("(TestSDPA or TestAttnBias or scaled_dot_product_attention or multiheadattention or is_causal "
          "or transformerencoderlayer_src_mask) and cpu and not compile")
QUICK = " and not batch_size_12 and not seq_len_1030"  # --quick: the fused-vs-math sweep at its smaller sizes


def run_form(path: Path, form: str, select: str, timeout: float, loops_work: int) -> dict:
    """One pytest process with ``form`` swapped in; the outcome of every test it ran."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        stub = Path(tmp) / "test_cpp_extensions_open_device_registration.py"  # the file imports it at the top
        stub.write_text("def remove_build_path():\n    pass\n\n\ndef generate_faked_module():\n    return None\n")
        env = dict(os.environ, ATTNLAB_SUITE_FORM=form, ATTNLAB_SUITE_REPORT=str(report),
                   PYTHONPATH=os.pathsep.join([str(HERE), tmp, os.environ.get("PYTHONPATH", "")]))
        if form == "loops":
            env["ATTNLAB_SUITE_MAX_WORK"] = str(loops_work)
        if form == "triton":
            env.update(TRITON_INTERPRET="1", ATTNLAB_SUITE_MAX_WORK=str(INTERPRETER_MAX_WORK))
        cmd = [sys.executable, "-m", "pytest", str(path), "-q", "-p", "sdpa_suite_plugin", "-p", "no:cacheprovider",
               "-k", select, "--rootdir", str(path.parent), "-o", "addopts="]
        t0 = time.monotonic()
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp)
            tail, timed_out = done.stdout.strip().splitlines()[-1:] or [done.stderr[-300:]], False
        except subprocess.TimeoutExpired:
            tail, timed_out = [f"stopped after {timeout:.0f} s"], True
        rows = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("passed", "failed", "skipped", "error")}
    return {"form": form, **counts, "seconds": round(time.monotonic() - t0, 1), "timed_out": timed_out,
            "pytest": tail[0], "not_passed": {r["test"]: f"{r['outcome']}: {r['message']}" for r in rows
                                              if r["outcome"] != "passed"},
            "_passed": sorted(r["test"] for r in rows if r["outcome"] == "passed")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="PyTorch's test/test_transformers.py")
    p.add_argument("--forms", default="torch,sdpa,matrix,flash,loops,triton")
    p.add_argument("-k", dest="select", default=SELECT, help="pytest -k expression (default: the SDPA tests)")
    p.add_argument("--out", type=Path, default=Path("attnlab-out"))
    p.add_argument("--quick", action="store_true", help="leave out the fused-vs-math sweep's batch 12 and length "
                   "1030 cases (192 of its 256): minutes a form instead of an hour on a small CPU")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per form")
    p.add_argument("--loops-work", type=int, default=20_000, help="largest N*H*L*S call given to the loops form")
    args = p.parse_args(argv)
    if not args.path.is_file():
        p.error(f"{args.path} is not a file: pass the path of PyTorch's test/test_transformers.py")
    forms = args.forms.split(",")
    select = args.select + (QUICK if args.quick else "")
    print(f"PyTorch's SDPA tests ({args.path}) with {len(forms)} forms swapped in, one pytest run each; "
          f"up to {args.timeout:.0f} s a form", flush=True)
    runs = []
    for form in forms:
        r = run_form(args.path.resolve(), form, select, args.timeout, args.loops_work)
        runs.append(r)
        print(f"{form:8s} {r['passed']:5d} passed {r['failed']:5d} failed {r['skipped']:5d} skipped "
              f"{r['error']:3d} errors  {r['seconds']:7.1f} s   ({r['pytest']})", flush=True)
    base = next((set(r["_passed"]) for r in runs if r["form"] == "torch"), None)
    for r in runs:
        passed = set(r.pop("_passed"))
        r["differs_from_torch"] = ({t: r["not_passed"][t] for t in sorted(base - passed) if t in r["not_passed"]}
                                   if base is not None and r["form"] != "torch" else None)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "pytorch_sdpa_suite.json"
    out.write_text(json.dumps({"machine": machine(), "versions": versions(), "test_file": str(args.path),
                               "select": select, "forms": runs}, indent=1))
    print(f"\n{'form':8s} | passed | failed | skipped | errors | fail where torch passes")
    for r in runs:
        diff = "-" if r["differs_from_torch"] is None else len(r["differs_from_torch"])
        print(f"{r['form']:8s} | {r['passed']:6d} | {r['failed']:6d} | {r['skipped']:7d} | {r['error']:6d} | {diff}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
