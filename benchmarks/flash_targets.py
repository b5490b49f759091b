"""The flash form against PyTorch's fused CPU kernel: the performance targets, measured side by side.

    .venv/bin/python benchmarks/flash_targets.py [--quick] [--out DIR] [--threads N] [--repeats N] [--dtypes ...]

Batch 1, 8 heads, head dim 64; float32, then bfloat16 and float16. Every comparison runs both sides in one process,
alternating calls (flash, PyTorch, flash, PyTorch, ...) so that a noisy machine slows both alike;
the table reports the median of each side and the median of the ratios of adjacent pairs (the JSON
also keeps the ratio of the two medians). Peak memory is *measured* (the extra
resident-set high-water mark of the call over its inputs, see attnlab.measure.memory), never computed.

Targets:
  forward            flash <= 1.25 x F.scaled_dot_product_attention at T = 2048, 4096, 8192, full and causal
  forward + backward flash <= 1.6 x PyTorch at T = 4096, causal
  memory             extra peak grows ~linearly with T and is within 2 x PyTorch's at T = 8192
  sliding_window(512) at T = 8192: >= 5 x faster than PyTorch given the dense bool mask
  sparse masks       at T = 8192, sliding_window(256 / 512 / 1024) and packed documents: <= 0.8 x
                     torch.compile(flex_attention) with the same block mask where that compiles (issue 31; also
                     shown: the flash form walking its tiles, bands=False, as it did before bands)
  bfloat16           forward <= 1.5 x F.sdpa in bfloat16 at T = 2048, 4096, 8192, full and causal;
                     forward + backward <= 2 x at T = 4096, causal
  float16            the same rows, measured and reported without a target
In half precision the flash form multiplies its weights in the input dtype only where the processor does
that fast (AMX / AVX512-BF16; attnlab.kernels.dtypes.matmul_dtype), else in float32: the JSON says which
path it took, the processor's flags, and the batched-matmul rate of each dtype at a tile's shapes.

Writes DIR/flash_targets-<processor>.json and .txt (one file per processor model: a run on another
machine adds a file beside this one) with every number, the load average before and after, and the
block size of flex's block mask: the flex comparison depends on the processor.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import attnlab
from attnlab import masks
from attnlab.kernels import tuned
from attnlab.kernels.dtypes import DTYPES, HALF, matmul_dtype
from attnlab.measure import flex, memory
from attnlab.measure.growth import exponent
from attnlab.measure.timing import alternate, bmm_rate
from attnlab.measure.tune import in_words
from attnlab.results import machine, versions
from attnlab.results.host import cpu_features

B, H, D = 1, 8, 64
SPARSE_TARGET = 0.8  # flash / compiled flex with the same mask (issue 31, on every processor)
TILE = 256  # the flash form's default tile: the matmul rates are measured at its shapes
HALF_TARGETS = {"bfloat16": (1.5, 2.0), "float16": (None, None)}  # forward, forward + backward


def inputs(T, grad=False, dtype=torch.float32):
    g = torch.Generator().manual_seed(T)
    return [torch.randn(B, H, T, D, generator=g).to(dtype).requires_grad_(grad) for _ in range(3)]


def slug(cpu: str) -> str:
    """A processor model as a file name: 'AMD EPYC 7B13' -> 'amd-epyc-7b13'."""
    return re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") or "unknown"


def matmul_rates(repeats: int) -> dict:
    """GFLOP/s per dtype of one tile's two products: scores (8 x 256 x 64 @ 64 x 256) and weights @ values."""
    return {name: {"scores": bmm_rate(dt, H, TILE, D, TILE, repeats=repeats),
                   "values": bmm_rate(dt, H, TILE, TILE, D, repeats=repeats)}
            for name, dt in DTYPES.items() if name != "float64"}


def side_by_side(a, b, repeats):
    """Median seconds of a() and b(), calls alternated after one warm-up each (:func:`attnlab.measure.timing.
    alternate`), and the median of the ratios a / b of each round (a round runs within a second, so a machine that
    slows down for a while slows both sides of it alike: the paired median is what the targets are held to)."""
    times = alternate({"a": a, "b": b}, repeats)
    ta, tb = times["a"], times["b"]
    return statistics.median(ta), statistics.median(tb), statistics.median(x / y for x, y in zip(ta, tb, strict=True))


def fwd(fn, q, k, v, **kw):
    with torch.no_grad():
        return lambda: fn(q, k, v, **kw)


def fwd_bwd(fn, q, k, v, **kw):
    def run():
        q.grad = k.grad = v.grad = None
        fn(q, k, v, **kw).backward(go)

    go = torch.randn(B, H, q.shape[2], D).to(q.dtype)
    return run


def flash(q, k, v, **kw):
    return attnlab.attention(q, k, v, impl="flash", **kw)


def packed_documents(T: int) -> masks.Mask:
    """Packed documents of uneven lengths (1/32 .. 1/4 of T), one id per position."""
    lengths = [T // 16, T // 8, 3 * T // 32, 3 * T // 16, T // 32, T // 4, T // 8]
    lengths.append(T - sum(lengths))
    return masks.document(torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller lengths (a smoke run, not the targets)")
    p.add_argument("--out", default="attnlab-out", help="folder for flash_targets-<processor>.json and .txt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7, help="alternated pairs per comparison (default 7)")
    p.add_argument("--dtypes", default="float32,bfloat16,float16",
                   help="which of float32, bfloat16, float16 to measure (default all three)")
    args = p.parse_args(argv)
    wanted = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    bad = [d for d in wanted if d not in ("float32", *HALF_TARGETS)]
    if bad or not wanted:
        p.error(f"--dtypes takes float32, bfloat16 and float16, got {args.dtypes!r}")
    torch.set_num_threads(args.threads)
    lengths = [256, 512, 1024] if args.quick else [2048, 4096, 8192]
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    feats = cpu_features()
    rows, out = [], {"machine": machine(), "versions": versions(), "threads": args.threads,
                     "config": {"batch": B, "heads": H, "head_dim": D, "dtypes": wanted, "quick": args.quick,
                                "repeats": args.repeats},
                     "cpu_features": feats,
                     "flash_matmul_dtype": {str(dt).split(".")[1]: str(matmul_dtype(dt, "cpu")).split(".")[1]
                                            for dt in HALF},
                     "load_average_before": os.getloadavg(), "tiles": tuned.current().as_dict()}
    flags = ", ".join(n for n in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_fp16") if feats.get(n))
    say(f"{out['machine']['cpu']} ({flags or 'flags unknown'}), {args.threads} threads, load average before "
        f"{out['load_average_before'][0]:.1f}" + (" (quick: not the targets)" if args.quick else ""))
    say("flash's weight matmuls in half precision: " + ", ".join(f"{k} inputs -> {v}"
                                                                 for k, v in out["flash_matmul_dtype"].items()))
    say(f"flash's {in_words(tuned.current())}")
    out["matmul_gflops"] = matmul_rates(3 if args.quick else 5)
    say("batched matmul GFLOP/s at a tile's shapes (scores / values): " + ", ".join(
        f"{n} {r['scores']:.1f} / {r['values']:.1f}" for n, r in out["matmul_gflops"].items()))

    def record(what, T, times, other, target, dtype="float32"):
        """One row of the table; ``target`` None: shown for comparison, not a target."""
        t_flash, t_other, ratio = times
        ok = None if target is None else ratio <= target
        rows.append({"what": what, "dtype": dtype, "T": T, "flash_s": t_flash, "other": other, "other_s": t_other,
                     "ratio": ratio, "ratio_of_medians": t_flash / t_other, "target": target, "met": ok})
        verdict = "(for comparison)" if ok is None else f"(target <= {target})  {'met' if ok else 'MISSED'}"
        label = what if dtype == "float32" else f"{dtype} {what}"
        say(f"{label:<34} T={T:<5} flash {t_flash * 1e3:9.1f} ms  {other:<22} {t_other * 1e3:9.1f} ms  "
            f"ratio {ratio:5.2f}  {verdict}")

    if "float32" in wanted:
        _float32(args, lengths, record, say, out)
    for name in (d for d in wanted if d in HALF_TARGETS):
        dt, (t_fwd, t_fb) = DTYPES[name], HALF_TARGETS[name]
        for T in lengths:
            q, k, v = inputs(T, dtype=dt)
            for causal in (False, True):
                times = side_by_side(fwd(flash, q, k, v, is_causal=causal),
                                     fwd(F.scaled_dot_product_attention, q, k, v, is_causal=causal), args.repeats)
                record(f"forward {'causal' if causal else 'full'}", T, times, f"F.sdpa {name}", t_fwd, name)
        T = lengths[1]
        q, k, v = inputs(T, grad=True, dtype=dt)
        times = side_by_side(fwd_bwd(flash, q, k, v, is_causal=True),
                             fwd_bwd(F.scaled_dot_product_attention, q, k, v, is_causal=True), args.repeats)
        record("forward + backward causal", T, times, f"F.sdpa {name}", t_fb, name)
    out["rows"] = rows
    finish(out, lines, args.out, f"flash_targets-{slug(out['machine']['cpu'])}", say)
    return 0



def finish(out: dict, lines: list, folder: str, stem: str, say) -> None:
    """Record the load average after, then write FOLDER/STEM.json (every number) and .txt (the printed table)."""
    out["load_average_after"] = os.getloadavg()
    say(f"load average after {out['load_average_after'][0]:.1f}")
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{stem}.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    (path / f"{stem}.txt").write_text("\n".join(lines) + "\n")
    print(f"wrote {path / stem}.json and .txt")

def _float32(args, lengths, record, say, out) -> None:
    """The float32 rows: forward, forward + backward, memory, the sliding window and the flex comparisons."""
    for T in lengths:
        q, k, v = inputs(T)
        for causal in (False, True):
            times = side_by_side(fwd(flash, q, k, v, is_causal=causal),
                                 fwd(F.scaled_dot_product_attention, q, k, v, is_causal=causal), args.repeats)
            record(f"forward {'causal' if causal else 'full'}", T, times, "F.sdpa", 1.25)

    T = lengths[1]
    q, k, v = inputs(T, grad=True)
    times = side_by_side(fwd_bwd(flash, q, k, v, is_causal=True),
                         fwd_bwd(F.scaled_dot_product_attention, q, k, v, is_causal=True), args.repeats)
    record("forward + backward causal", T, times, "F.sdpa", 1.6)

    mem = {"flash": {}, "sdpa": {}, "matrix": {}}
    mem_lengths = [lengths[0] // 2, *lengths]
    for T in mem_lengths:
        q, k, v = inputs(T)
        with torch.no_grad():
            for name, fn in (("flash", flash), ("sdpa", F.scaled_dot_product_attention),
                             ("matrix", lambda q, k, v: attnlab.attention(q, k, v, impl="matrix"))):
                if name == "matrix" and T > 4096:
                    continue  # two 8 x T x T float32 matrices: 4 GiB, measured up to 4096 only
                fn(q, k, v)
                mem[name][T] = memory.measure_peak(lambda fn=fn, q=q, k=k, v=v: fn(q, k, v))
        say(f"extra peak memory T={T:<5} " + "  ".join(
            f"{n} {mem[n][T] / 2**20:8.1f} MiB" for n in mem if mem[n].get(T) is not None))
    out["memory_bytes"] = mem
    exps = {n: exponent(list(m), list(m.values())) for n, m in mem.items()
            if len(m) >= 2 and all(x and x > 0 for x in m.values())}
    out["memory_exponents"] = exps
    T8 = mem_lengths[-1]
    mem_ratio = mem["flash"][T8] / mem["sdpa"][T8]
    say(f"memory growth exponents: {', '.join(f'{n} {e:.2f}' for n, e in exps.items())}; "
        f"flash / sdpa extra peak at T={T8}: {mem_ratio:.2f} (target <= 2)")
    out["memory_ratio_at_max_T"] = mem_ratio

    T = lengths[-1]
    q, k, v = inputs(T)
    sw = masks.sliding_window(512)
    dense = sw.dense(1, 1, T, T)
    times = side_by_side(fwd(flash, q, k, v, attn_mask=sw),
                         fwd(F.scaled_dot_product_attention, q, k, v, attn_mask=dense), args.repeats)
    record("sliding_window(512) vs dense mask", T, times, "F.sdpa + bool mask", 0.2)
    why = flex.unavailable()
    if why is None:
        t0 = time.perf_counter()
        flex.attention(q, k, v, attn_mask=sw)
        out["flex_compile_s"] = time.perf_counter() - t0
        out["flex_block_size"] = list(flex.block_size(sw, B, H, T, T, q.device))
        tiles = fwd(flash, q, k, v, attn_mask=sw, bands=False)
        times = side_by_side(tiles, fwd(flex.attention, q, k, v, attn_mask=sw), args.repeats)
        record("sliding_window(512), tiles vs flex", T, times, "compiled flex_attention", None)
        for mask in (masks.sliding_window(256), sw, masks.sliding_window(1024), packed_documents(T)):
            times = side_by_side(fwd(flash, q, k, v, attn_mask=mask), fwd(flex.attention, q, k, v, attn_mask=mask),
                                 args.repeats)
            record(f"{mask.name} vs flex", T, times, "compiled flex_attention", SPARSE_TARGET)
    else:
        say(f"flex_attention: not measured ({why})")
        out["flex_unavailable"] = why


if __name__ == "__main__":
    raise SystemExit(main())
