"""The triton form on one GPU: a correctness sweep, then TFLOP/s against PyTorch's own kernels.

    python benchmarks/gpu.py [--out DIR]        # one H200: under 8 minutes
    python benchmarks/gpu.py --dry-run          # the same code on a CPU, Triton's interpreter, tiny sizes

0. `attnlab verify --device cuda --quick` for the triton form and sdpa (float32, float16, bfloat16),
   its JSON beside gpu.json: the whole grid, judged where the kernel runs.
1. Correctness: forward and dq, dk, dv of the triton form on masks, GQA, odd lengths and head dims,
   each held to the tolerance rule against a float32 reference: at most 2 x PyTorch's own error
   (F.scaled_dot_product_attention on the same inputs) plus the rounding floor of the dtype.
2. Speed, bfloat16, head dims 64 and 128, T = 1k .. 16k, causal and full, forward and forward +
   backward, batch x heads sized so that every T has the same number of tokens (enough to fill the
   GPU): the triton form; PyTorch SDPA's flash, cuDNN and memory-efficient backends; compiled
   flex_attention; attnlab's plain-PyTorch flash form and the matrix form (while they fit). TFLOP/s by
   the one FLOP formula (attnlab.measure.flops), peak memory from torch.cuda.max_memory_allocated.
3. A sliding window (w = 1024, T = 16k): the triton form (the window is evaluated in the kernel and
   the tiles outside it are never visited) against SDPA given the dense bool mask, and flex.

Writes DIR/gpu.json (every number, machine and versions, the targets and whether they were met)
and DIR/gpu.png (TFLOP/s against T). Targets (H200, bfloat16, head dim 128, T >= 4k): forward >= 70 %
of the fastest SDPA backend, causal and full; forward + backward >= 55 %; sliding window >= 5 x SDPA
with the dense mask and faster than flex.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

SIZES = {  # what --dry-run shrinks: (GPU, dry run)
    "dims": ((64, 128), (32,)),  # the dry run walks each path once: one head dim is enough
    "lengths": ((1024, 2048, 4096, 8192, 16384), (16, 32)),
    "tokens": (32768, 32),  # batch x T, the same at every T
    "heads": ({64: 32, 128: 16}, {32: 2}),
    "window": ((16384, 1024, 128, 8), (64, 8, 16, 2)),  # T, w, head dim, heads
    "dense_T": (8192, 32),  # the matrix form up to this T (it holds B x H x T x T scores)
}
IMPLS = ("triton", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "flex", "flash (PyTorch)", "matrix")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="attnlab-out/gpu", help="folder for gpu.json and gpu.png")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU under Triton's interpreter")
    p.add_argument("--repeats", type=int, default=10, help="timed calls per case (median kept)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds one case may take, else skipped (default: 20 on a GPU, 120 in a dry run)")
    args = p.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before attnlab (and Triton) define anything
    import torch

    from attnlab.results import machine, versions

    gpu = not args.dry_run
    if gpu and not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device here; run it on a GPU, or try --dry-run", file=sys.stderr)
        return 2
    S = {k: v[0 if gpu else 1] for k, v in SIZES.items()}
    device = "cuda" if gpu else "cpu"
    repeats = args.repeats if gpu else 1
    budget = args.budget or (20.0 if gpu else 120.0)  # the interpreter's time does not grow as T^2
    out = {"machine": machine(), "versions": versions(), "dry_run": args.dry_run, "device": device,
           "gpu": torch.cuda.get_device_name() if gpu else None, "sizes": S, "repeats": repeats}
    t0 = time.perf_counter()
    out["correctness"] = correctness(device, gpu)
    print(f"correctness: {sum(c['passed'] for c in out['correctness'])} of {len(out['correctness'])} cases pass "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    out["verify"] = verify_on_device(device, gpu, folder=Path(args.out))
    out["speed"] = speed(S, device, repeats, budget)
    out["window"] = window(S, device, repeats, budget)
    out["targets"] = targets(out, max(S["dims"]), min(4096, max(S["lengths"])))
    out["seconds"] = time.perf_counter() - t0
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gpu.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    figure(out, folder / "gpu.png")
    for t in out["targets"]:
        verdict = "dry run: not a measurement" if args.dry_run else ("met" if t["met"] else "MISSED")
        print(f"target {t['what']}: {t['value']:.2f} (target {t['target']}) {verdict}")
    print(f"wrote {folder / 'gpu.json'} and {folder / 'gpu.png'} in {out['seconds']:.0f} s")
    return 0


def verify_on_device(device, gpu, folder: Path) -> list[dict]:
    """`attnlab verify --device DEVICE --quick` for the triton form and for sdpa: the judge where the kernel runs
    (inputs on the device in each case's dtype, PyTorch on the device as the 2x baseline, the oracle on the CPU
    in float64). The dry run checks a few cases on the CPU under the interpreter."""
    import subprocess

    rows = []
    folder.mkdir(parents=True, exist_ok=True)
    for impl in ("triton", "sdpa"):
        path = folder / f"verify-{impl}.json"
        cmd = [sys.executable, "-m", "attnlab", "verify", "--impl", impl, "--device", device, "--quick",
               "--show", "failures", "--json", str(path)]
        cmd += ["--dtypes", "float32,float16,bfloat16"] if gpu else [
            # three cases; --only splits at commas, so the third is named by a comma-free part of its name
            "--dtypes", "bfloat16", "--only", "basic,GQA 6/2 causal,transposed (B"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        result = json.loads(path.read_text()) if path.exists() else {}
        statuses = [x["status"] for x in result.get("rows", [])]
        counts = {s: statuses.count(s) for s in ("pass", "fail", "error", "skipped")}
        rows.append({"impl": impl, "exit_code": r.returncode, "seconds": time.perf_counter() - t0, "counts": counts,
                     "diagnoses": result.get("diagnoses", {}), "stderr": r.stderr.strip().splitlines()[-3:]})
        print(f"verify --device {device} --impl {impl}: exit {r.returncode}, {counts} "
              f"({rows[-1]['seconds']:.0f} s)", flush=True)
    return rows


def inputs(B, H, Hkv, L, S_, E, dtype, device, grad=False, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    t = [torch.randn(B, H, L, E, generator=g), torch.randn(B, Hkv, S_, E, generator=g),
         torch.randn(B, Hkv, S_, E, generator=g), torch.randn(B, H, L, E, generator=g)]
    return [x.to(device=device, dtype=dtype).requires_grad_(grad and i < 3) for i, x in enumerate(t)]


def correctness(device, gpu) -> list[dict]:
    """The triton form and PyTorch against the float64 oracle on the CPU, forward and gradients, under the tolerance
    rule with its rounding floor."""
    import torch
    import torch.nn.functional as F

    import attnlab
    from attnlab import masks
    from attnlab.judge import oracle, rule

    f = 1 if gpu else 32  # the dry run divides lengths by 32
    T = 1000 // f
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    doc = torch.arange(T) * 5 // T
    cases = [  # name, (B, H, Hkv, L, S, E), dtype, keywords
        ("full, odd T", (2, 8, 8, T, T, 64), bf16, {}),
        ("causal", (2, 8, 8, T, T, 128), bf16, {"is_causal": True}),
        ("causal float16", (2, 8, 8, T, T, 128), f16, {"is_causal": True}),
        ("causal float32", (1, 4, 4, T, T, 64), f32, {"is_causal": True}),
        ("lower-right L < S", (2, 8, 8, T // 3, T, 64), bf16, {"attn_mask": masks.causal_lower_right()}),
        ("GQA 32/8 causal", (1, 32, 8, T, T, 128), bf16, {"is_causal": True, "enable_gqa": True}),
        ("head dim 40", (2, 4, 4, T, T, 40), bf16, {"is_causal": True}),
        ("head dim 256", (1, 4, 4, T // 2, T // 2, 256), bf16, {}),
        ("sliding window 128", (1, 8, 8, T, T, 64), bf16, {"attn_mask": masks.sliding_window(max(2, 128 // f))}),
        ("prefix-LM", (1, 8, 8, T, T, 64), bf16, {"attn_mask": masks.prefix_lm(100 // f)}),
        ("document & causal", (1, 8, 8, T, T, 64), bf16, {"attn_mask": masks.document(doc) & masks.causal()}),
        ("mask_mod (block map)", (1, 4, 4, T, T, 64), bf16,
         {"attn_mask": masks.Mask.from_mod(lambda b, h, i, j: (j <= i) & ((i - j) % 7 != 3))}),
        ("bool mask, dead rows", (1, 4, 4, T, T, 64), bf16, {"attn_mask": "dead-rows"}),
    ]
    rows = []
    for name, (B, H, Hkv, L, S_, E), dtype, kw in cases:
        q, k, v, go = inputs(B, H, Hkv, L, S_, E, dtype, device)
        kw = dict(kw)
        if kw.get("attn_mask") == "dead-rows":
            m = torch.rand(B, H, L, S_, generator=torch.Generator().manual_seed(1)) > 0.5
            m[..., ::7, :] = False
            kw["attn_mask"] = m.to(device)
        mask = kw.pop("attn_mask", None)
        dense = mask.dense(B, H, L, S_, device=device) if isinstance(mask, masks.Mask) else mask

        def run(fn, m, cast, kw=kw, qkvg=(q, k, v, go)):
            ins = [x.detach().to(cast).requires_grad_() for x in qkvg[:3]]
            o = fn(*ins, attn_mask=m, **kw)
            return [o, *torch.autograd.grad(o, ins, qkvg[3].to(cast))]

        try:
            mine = run(lambda *a, **k_: attnlab.attention(*a, impl="triton", **k_), mask, dtype)
        except Exception as e:  # a kernel that fails to compile or run is a failed case, with the reason
            rows.append({"case": name, "dtype": str(dtype), "passed": False, "error": f"{type(e).__name__}: {e}"})
            print(f"  {name}: ERROR {type(e).__name__}: {e}", flush=True)
            continue
        theirs = run(F.scaled_dot_product_attention, dense, dtype)
        cpu = [x.detach().cpu() for x in (q, k, v, go)]
        m64 = oracle.cpu64(mask if isinstance(mask, masks.Mask) else dense)
        args = (*cpu[:3], m64, kw.get("is_causal", False), None, kw.get("enable_gqa", False))
        ref = oracle.reference(*args, grad_out=cpu[3])
        floors = rule.rounding_floor(*args, grad_out=cpu[3], dtype=dtype)
        comps = [rule.compare(n, a, b, r, dtype, floors[n]) for n, a, b, r in zip(("out", "dq", "dk", "dv"), mine,
                                                                                    theirs, ref, strict=True)]
        ok = all(c.passed for c in comps)
        rows.append({"case": name, "dtype": str(dtype), "sizes": [B, H, Hkv, L, S_, E], "passed": ok,
                     "comparisons": [c.__dict__ for c in comps]})
        print(f"  {name:<22} {str(dtype):<15} " + "  ".join(
            f"{c.quantity} {c.err:.1e}/{c.allowed:.1e}" for c in comps) + ("" if ok else "  FAIL"), flush=True)
    return rows


def backends():
    """Each line of the speed sweep: a function (q, k, v, causal, mask) -> out."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import attnlab
    from attnlab.measure import flex

    def sdpa(backend):
        def fn(q, k, v, causal, mask):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return fn

    def form(name):
        return lambda q, k, v, causal, mask: attnlab.attention(q, k, v, attn_mask=mask, is_causal=causal, impl=name)

    return {"triton": form("triton"), "sdpa-flash": sdpa(SDPBackend.FLASH_ATTENTION),
            "sdpa-cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), "sdpa-efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION),
            "flex": lambda q, k, v, causal, mask: flex.attention(q, k, v, attn_mask=mask, is_causal=causal),
            "flash (PyTorch)": form("flash"), "matrix": form("matrix"),
            "sdpa": lambda q, k, v, causal, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                                 is_causal=causal)}


def measure(fn, q, k, v, go, causal, mask, backward, device, repeats, budget):
    """Median seconds of one call (forward, or forward + backward) and its peak memory in bytes."""
    import torch

    from attnlab.measure import memory
    from attnlab.measure.timing import time_calls

    def call():
        if backward:
            q.grad = k.grad = v.grad = None
            fn(q, k, v, causal, mask).backward(go)
        else:
            with torch.no_grad():
                fn(q, k, v, causal, mask)

    t = time.perf_counter()
    call()  # warm-up: compiles (triton, flex) and autotunes; not timed
    if time.perf_counter() - t > budget:
        return None, None, f"one call took {time.perf_counter() - t:.1f} s > budget {budget:g} s"
    times = time_calls(call, 0, repeats, device, budget_s=budget, min_repeats=min(3, repeats))
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        call()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = memory.measure_peak(call)
    return statistics.median(times), peak, None


def speed(S, device, repeats, budget) -> list[dict]:
    import torch

    from attnlab.measure.flops import attention_flops

    lines = backends()
    rows, slow = [], {}  # slow: (impl, d, causal, mode) -> seconds at the last T, to skip what cannot fit
    for d in S["dims"]:
        H = S["heads"][d]
        for T in S["lengths"]:
            B = max(1, S["tokens"] // T)
            for backward in (False, True):
                mode = "forward+backward" if backward else "forward"
                q, k, v, go = inputs(B, H, H, T, T, d, torch.bfloat16, device, grad=backward)
                for causal in (False, True):
                    flops = attention_flops(B, H, T, T, d, causal=causal, mode=mode)
                    for name in IMPLS:
                        row = {"impl": name, "d": d, "T": T, "B": B, "H": H, "causal": causal, "mode": mode}
                        key = (name, d, causal, mode)
                        why = None
                        if name == "matrix" and S["dense_T"] < T:
                            why = f"T x T scores: measured up to T = {S['dense_T']}"
                        elif key in slow and slow[key] * 4 * 5 > budget:  # time grows as T^2; warm-up + 3 + 1
                            why = f"estimated {slow[key] * 4:.2g} s a call (4 x the time at T/2): over --budget"
                        sec = peak = None
                        if why is None:
                            try:
                                sec, peak, why = measure(lines[name], q, k, v, go, causal, None, backward, device,
                                                         repeats, budget)
                            except Exception as e:  # a backend that does not take this case: why, and go on
                                why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                                if device == "cuda":
                                    torch.cuda.empty_cache()
                        if sec is not None:
                            slow[key] = sec
                            row.update(seconds=sec, tflops=flops / sec / 1e12, peak_bytes=peak)
                        else:
                            row["skipped"] = why[:200]
                        rows.append(row)
                        print(f"  d={d:<4} T={T:<6} {mode:<17} {'causal' if causal else 'full':<7} {name:<16} " + (
                            f"{row['tflops']:8.3g} TFLOP/s  {sec * 1e3:9.3f} ms" if sec is not None
                            else f"skipped: {row['skipped'][:90]}"), flush=True)
                del q, k, v, go
                gc.collect()
    return rows


def window(S, device, repeats, budget) -> list[dict]:
    """Sliding window: the kernel's rule against SDPA with the dense mask, and flex."""
    import torch

    from attnlab import masks

    T, w, d, H = S["window"]
    mask = masks.sliding_window(w)
    dense = mask.dense(1, 1, T, T, device=device)  # (1, 1, T, T) bool: what SDPA needs to be told
    lines = backends()
    todo = [("triton", lines["triton"], mask), ("sdpa + dense mask", lines["sdpa"], dense),
            ("flex", lines["flex"], mask)]
    rows = []
    for backward in (False, True):
        q, k, v, go = inputs(1, H, H, T, T, d, torch.bfloat16, device, grad=backward)
        for name, fn, m in todo:
            row = {"impl": name, "T": T, "window": w, "d": d, "H": H,
                   "mode": "forward+backward" if backward else "forward"}
            try:
                sec, peak, why = measure(fn, q, k, v, go, False, m, backward, device, repeats, budget)
            except Exception as e:
                sec, peak, why = None, None, f"{type(e).__name__}: {str(e).strip()[:150]}"
            row.update({"seconds": sec, "peak_bytes": peak} if sec is not None else {"skipped": why})
            rows.append(row)
            print(f"  sliding window {w} T={T} {row['mode']:<17} {name:<18} " +
                  (f"{sec * 1e3:9.3f} ms" if sec is not None else f"skipped: {why}"), flush=True)
    return rows


def targets(out, d, T_min) -> list[dict]:
    """The targets (module docstring) from the measured rows: triton's share of the fastest SDPA backend."""
    res = []
    for mode, target in (("forward", 0.70), ("forward+backward", 0.55)):
        for causal in (False, True):
            shares = []
            for T in sorted({r["T"] for r in out["speed"] if r["T"] >= T_min}):
                at = {r["impl"]: r.get("tflops") for r in out["speed"]
                      if r["d"] == d and r["T"] == T and r["causal"] == causal and r["mode"] == mode}
                best = max((v for n, v in at.items() if n.startswith("sdpa") and v), default=None)
                if at.get("triton") and best:
                    shares.append(at["triton"] / best)
            if shares:
                res.append({"what": f"{mode} {'causal' if causal else 'full'}, d={d}, T>={T_min}: "
                                    f"triton / fastest SDPA (worst T)", "value": min(shares), "target": target,
                            "met": min(shares) >= target})
    for mode in ("forward", "forward+backward"):
        t = {r["impl"]: r.get("seconds") for r in out["window"] if r["mode"] == mode}
        if t.get("triton") and t.get("sdpa + dense mask"):
            v = t["sdpa + dense mask"] / t["triton"]
            res.append({"what": f"sliding window {mode}: speed-up over SDPA with the dense mask", "value": v,
                        "target": 5.0, "met": v >= 5.0})
        if t.get("triton") and t.get("flex"):
            v = t["flex"] / t["triton"]
            res.append({"what": f"sliding window {mode}: speed-up over flex", "value": v, "target": 1.0,
                        "met": v > 1.0})
    return res


def figure(out, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = sorted({r["d"] for r in out["speed"]})
    panels = [(m, c) for m in ("forward", "forward+backward") for c in (False, True)]
    fig, axes = plt.subplots(len(dims), len(panels), figsize=(4.2 * len(panels), 3.4 * len(dims) + 0.5),
                             squeeze=False)
    shown = set()
    for i, d in enumerate(dims):
        for j, (mode, causal) in enumerate(panels):
            ax = axes[i][j]
            for name in IMPLS:
                pts = sorted((r["T"], r["tflops"]) for r in out["speed"] if r["impl"] == name and r["d"] == d
                             and r["mode"] == mode and r["causal"] == causal and "tflops" in r)
                if pts:  # one colour per line in every panel, whichever lines a panel has
                    ax.plot(*zip(*pts, strict=True), marker="o", lw=2.2 if name == "triton" else 1.2,
                            color=f"C{IMPLS.index(name)}", label=name)
                    shown.add(name)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"d={d}, {mode}, {'causal' if causal else 'full'}", fontsize=9)
            ax.set_xlabel("T (queries = keys)")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=f"C{i}", marker="o", label=n) for i, n in enumerate(IMPLS) if n in shown]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8)
    where = out["gpu"] or "CPU, Triton interpreter (dry run: the code path, not the speed)"
    fig.suptitle(f"Attention TFLOP/s, bfloat16 -- {where}", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
