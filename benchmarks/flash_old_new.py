"""The flash form as it is against an earlier version of itself, side by side in one process.

    .venv/bin/python benchmarks/flash_old_new.py --old REV [--threads 2] [--repeats 7] [--quick] [--only TEXT]

REV is a git revision of this repository (the commit before a change, e.g. ``main`` before it is merged). Its
``src/attnlab/kernels`` is taken out with ``git archive`` into a temporary folder and imported as a package of its
own (the kernels import nothing outside themselves), so both versions run in one process on the same inputs, their
calls alternated round by round, the order reversed every other round (:func:`attnlab.measure.timing.alternate`).
``--old-src DIR`` takes a folder that holds ``attnlab/kernels`` instead.

The rows are those of benchmarks/flash_targets.py that the flash form runs (float32 forward, full and causal, at
T = 2048, 4096, 8192; forward + backward causal at 4096; sliding windows of 256, 512 and 1024 and packed documents
at 8192; bfloat16 and float16 forward at 2048 and forward + backward at 4096) and of benchmarks/flash_mods.py
(soft-cap 30, ALiBi's paper slopes, a learned T5 bias; causal and a window of 512; forward and forward + backward;
T = 4096 and 8192; fused, and as a plain function). Batch 1, 8 heads, head dim 64. Each row prints the median of
each side and the median of the ratios new / old of each round, and flags a row whose ratio is above 1.03. It says
nothing on a busy machine: run it on a quiet one, and read the load average it prints before and after.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import torch

import attnlab.kernels as new_kernels
from attnlab.measure.timing import alternate

B, H, D = 1, 8, 64
LIMIT = 1.03  # new / old above this: slower than the issue allows
ROOT = Path(__file__).resolve().parent.parent


def load_kernels(src: Path, name: str = "attnlab_old_kernels"):
    """The package ``src/attnlab/kernels`` imported under ``name``, with its flash, mods and masks modules."""
    folder = src / "attnlab" / "kernels"
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    for sub in ("flash", "mods", "masks"):
        importlib.import_module(f"{name}.{sub}")
    return package


def extract(rev: str) -> Path:
    """``src/attnlab/kernels`` at git revision ``rev``, in a temporary folder; returns the folder's ``src``."""
    out = Path(tempfile.mkdtemp(prefix="attnlab-old-"))
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src/attnlab/kernels"], check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(out, filter="data")
    return out / "src"


def packed_documents(masks, T: int):
    """flash_targets.py's packed documents of uneven lengths, built by ``masks`` (each side's own module)."""
    lengths = [T // 16, T // 8, 3 * T // 32, 3 * T // 16, T // 32, T // 4, T // 8]
    lengths.append(T - sum(lengths))
    return masks.document(torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)]))


def target_rows(quick: bool) -> list[tuple]:
    """(label, T, dtype, backward, mask spec, modifier spec) of flash_targets.py's flash rows."""
    lengths = [512, 1024] if quick else [2048, 4096, 8192]
    long = lengths[-1]
    rows = [(f"float32 {m} forward", T, "float32", False, m, None) for T in lengths for m in ("full", "causal")]
    rows.append(("float32 causal forward + backward", lengths[1], "float32", True, "causal", None))
    rows += [(f"float32 {m} forward", long, "float32", False, m, None)
             for m in ("window 256", "window 512", "window 1024", "documents")]
    for dt in ("bfloat16", "float16"):
        rows += [(f"{dt} {m} forward", lengths[0], dt, False, m, None) for m in ("full", "causal")]
        rows.append((f"{dt} causal forward + backward", lengths[1], dt, True, "causal", None))
    return rows


def mod_rows(quick: bool) -> list[tuple]:
    """flash_mods.py's rows, each fused and as a function."""
    lengths = [1024] if quick else [4096, 8192]
    names = ("softcap(30)", "alibi(8)", "t5 bias (learned)")
    return [(f"{m} {'as a function ' if fn else ''}{mask} {'forward + backward' if bwd else 'forward'}", T,
             "float32", bwd, mask, (m, fn))
            for T in lengths for m in names for mask in ("causal", "window 512") for bwd in (False, True)
            for fn in (False, True)]


def build(kernels, mask: str, mod, T: int, table: torch.Tensor) -> dict:
    """The keyword arguments of one row for one side, from that side's own masks and mods."""
    masks, mods = sys.modules[kernels.__name__ + ".masks"], sys.modules[kernels.__name__ + ".mods"]
    kw = {"is_causal": True} if mask == "causal" else {}
    if mask.startswith("window"):
        kw["attn_mask"] = masks.sliding_window(int(mask.split()[1]))
    elif mask == "documents":
        kw["attn_mask"] = packed_documents(masks, T)
    if mod is not None:
        name, as_function = mod
        m = {"softcap(30)": lambda: mods.softcap(30.0), "alibi(8)": lambda: mods.alibi(H),
             "t5 bias (learned)": lambda: mods.relative_bias(table, max_distance=128, bidirectional=False)}[name]()
        kw["score_mod"] = mods.Mod(m.fn, m.name + " as a function", m.params) if as_function else m
    return kw


def row(old, new, T: int, dtype: str, backward: bool, mask: str, mod, repeats: int) -> dict:
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(getattr(torch, dtype)).requires_grad_(backward)
               for _ in range(3))
    go = torch.randn(B, H, T, D, generator=g).to(q.dtype)
    table = (torch.randn(H, 32, generator=g) * 0.1).requires_grad_(True)

    def call(kernels):
        kw = build(kernels, mask, mod, T, table)
        fn = sys.modules[kernels.__name__ + ".flash"].attention
        if not backward:
            def run():
                with torch.no_grad():
                    fn(q, k, v, **kw)
            return run

        def run():
            q.grad = k.grad = v.grad = table.grad = None
            fn(q, k, v, **kw).backward(go)
        return run

    times = alternate({"old": call(old), "new": call(new)}, repeats)
    return {"old_ms": statistics.median(times["old"]) * 1e3, "new_ms": statistics.median(times["new"]) * 1e3,
            "new/old": statistics.median(n / o for n, o in zip(times["new"], times["old"], strict=True))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", help="a git revision of this repository: the flash form to compare against")
    p.add_argument("--old-src", type=Path, help="or a folder holding attnlab/kernels")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7, help="alternated rounds per row (default 7)")
    p.add_argument("--quick", action="store_true", help="short lengths: a smoke run, not the comparison")
    p.add_argument("--only", default="", help="run only the rows whose label contains this text")
    args = p.parse_args(argv)
    if (args.old is None) == (args.old_src is None):
        p.error("give --old REV or --old-src DIR")
    old = load_kernels(extract(args.old) if args.old else args.old_src)
    torch.set_num_threads(args.threads)
    print(f"old: {args.old or args.old_src}; new: {Path(new_kernels.__file__).parent}; {args.threads} threads; "
          f"load average before {os.getloadavg()[0]:.1f}", flush=True)
    slower = 0
    for label, T, dtype, backward, mask, mod in target_rows(args.quick) + mod_rows(args.quick):
        if args.only and args.only not in label:
            continue
        r = row(old, new_kernels, T, dtype, backward, mask, mod, args.repeats)
        flag = "" if r["new/old"] <= LIMIT else f"  SLOWER than {LIMIT}"
        slower += bool(flag)
        print(f"{label:<58} T={T:<5} old {r['old_ms']:9.1f} ms  new {r['new_ms']:9.1f} ms  new/old "
              f"{r['new/old']:5.3f}{flag}", flush=True)
    print(f"{slower} row(s) above {LIMIT}; load average after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
