"""The dense float32 gap at T = 2048: where the flash form's time goes, and what each lever does to it.

    .venv/bin/python benchmarks/flash_levers.py [--out DIR] [--threads N] [--rounds N]

Batch 1, 8 heads, head dim 64, float32, forward, full attention at T = 2048 (issue 31, part 3). Four measurements,
each side by side in this one process:

  profile      torch.profiler's self time per operation of the flash form's call, and the matmuls' GFLOP/s
  compile      one tile step (scores, exp2, row sums, weights @ values; 8 heads x 256 x 256) as the plain
               in-place tensor code the flash form runs, against torch.compile of the same step
  fused sum    the row sums l = rowsum(P) taken by the values' matmul (a column of ones after v) instead of a
               sum of their own
  tiles        the flash form at several tile sizes against F.sdpa, alternated, paired medians
  sparse       the same profile for the sparse masks at T = 8192 (sliding_window(1024), packed documents): the
               matmuls' GFLOP/s against the measured peak, beside compiled flex's GFLOP/s on the work it does
  tanh         the soft-cap's tanh per element: torch.tanh and a multiply, the five-pass expm1 form it had, and
               online.tanh_ (three passes: the 2 on the matmul's alpha, the cap on the denominator, no clamp)
  alibi split  ALiBi's paper slopes under the causal mask with its exactly-zero keys dropped (flash_reach) against
               split_heads=False, forward at T = 8192 and forward + backward at T = 4096
  band share   sliding windows of 1024 and 2048 at T = 8192 on the bands against the tiles (flash_band's
               SHARE_OF_TILES decides which runs)
  decode       one query against S = 32768 cached keys (what a KV-cache step is), flash against F.sdpa: the
               issue keeps flash the faster there

Writes DIR/flash_levers-<processor>.json and .txt with every number, the processor and the load before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import attnlab
from attnlab.kernels import flash
from attnlab.kernels.masks import EMPTY
from attnlab.measure import timing
from attnlab.results import machine, versions

sys.path.insert(0, str(Path(__file__).parent))
from flash_targets import finish, packed_documents, slug  # noqa: E402

B, H, T, D = 1, 8, 2048, 64
TILE = 256
SIZES = [(256, 256), (512, 256), (512, 512), (1024, 256), (2048, 256), (256, 512)]


def per_call(f, n: int) -> float:
    """Median seconds of n calls after two warm-ups."""
    f()
    f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def profile_flash(q, k, v, calls: int = 5, flop: float | None = None, **kw) -> dict:
    """Self time per operation of the flash form's call; ``flop``: what each of its two matmuls computes (default:
    every score of full attention)."""
    def f():
        with torch.no_grad():
            attnlab.attention(q, k, v, impl="flash", **kw)
    for _ in range(2):
        f()
    t0 = time.perf_counter()
    for _ in range(calls):
        f()
    wall = (time.perf_counter() - t0) / calls
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            f()
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:10]
    flop = flop or 2 * B * H * q.shape[2] * k.shape[2] * D  # each of the two matmuls
    rows = {e.key: {"self_ms_per_call": e.self_cpu_time_total / 1e3 / calls, "calls_per_call": e.count // calls}
            for e in ops}
    for name in ("aten::baddbmm", "aten::baddbmm_", "aten::bmm"):
        if name in rows:
            rows[name]["gflops"] = flop / (rows[name]["self_ms_per_call"] / 1e3) / 1e9
    return {"wall_ms_per_call": wall * 1e3, "ops": rows}


def tile_step(rounds: int) -> dict:
    """One tile step, in place (as flash's bounded path runs it) against torch.compile of the same step."""
    g = torch.Generator().manual_seed(0)
    q, kT, v = (torch.randn(*s, generator=g) * 0.1 for s in ((H, TILE, D), (H, D, TILE), (H, TILE, D)))
    buf, l, acc = torch.empty(H, TILE, TILE), torch.zeros(H, TILE), torch.zeros(H, TILE, D)

    def eager():
        s = torch.baddbmm(buf, q, kT, beta=0, alpha=0.18, out=buf)
        s.exp2_()
        l.add_(s.sum(-1))
        acc.baddbmm_(s, v)

    def step(q, kT, v, l, acc):
        p = torch.exp2(torch.bmm(q, kT) * 0.18)
        return l + p.sum(-1), acc + torch.bmm(p, v)

    compiled = torch.compile(step, dynamic=False)
    t0 = time.perf_counter()
    compiled(q, kT, v, l, acc)
    compile_s = time.perf_counter() - t0
    sides = {"eager in place": eager, "torch.compile": lambda: compiled(q, kT, v, l, acc),
             "the two matmuls alone": lambda: (torch.bmm(q, kT, out=buf), torch.bmm(buf, v))}
    us = {n: per_call(f, 200) * 1e6 for n, f in sides.items()}
    return {"us": us, "compile_s": compile_s, "compiled / eager": us["torch.compile"] / us["eager in place"]}


def fused_sum() -> dict:
    g = torch.Generator().manual_seed(1)
    p, v = torch.rand(H, TILE, TILE, generator=g), torch.randn(H, TILE, D, generator=g)
    v1 = torch.cat([v, torch.ones(H, TILE, 1)], dim=-1)
    acc, acc1, l = torch.zeros(H, TILE, D), torch.zeros(H, TILE, D + 1), torch.zeros(H, TILE)
    us = {"P V, then rowsum(P)": per_call(lambda: (acc.baddbmm_(p, v), l.add_(p.sum(-1))), 300) * 1e6,
          "rowsum(P) alone": per_call(lambda: l.add_(p.sum(-1)), 300) * 1e6,
          "P [V | 1] (the sum in the matmul)": per_call(lambda: acc1.baddbmm_(p, v1), 300) * 1e6}
    return {"us": us, "fused / separate": us["P [V | 1] (the sum in the matmul)"] / us["P V, then rowsum(P)"]}


def alternate(calls: dict, rounds: int, grad: bool = False) -> dict:
    """lab.measure.timing.alternate with autograd on (``grad``) or off."""
    with torch.set_grad_enabled(grad):
        return timing.alternate(calls, rounds)


def tiles_vs_sdpa(q, k, v, rounds: int) -> dict:
    out = {}
    for causal in (False, True):
        calls = {"F.sdpa": lambda c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c)}
        for bq, bk in SIZES:
            calls[f"flash {bq} x {bk}"] = lambda c=causal, bq=bq, bk=bk: attnlab.attention(
                q, k, v, impl="flash", is_causal=c, block_q=bq, block_k=bk)
        times = alternate(calls, rounds)
        out["causal" if causal else "full"] = {
            n: {"median_ms": statistics.median(t) * 1e3,
                "ratio_to_sdpa": statistics.median(a / b for a, b in zip(t, times["F.sdpa"], strict=True))}
            for n, t in times.items()}
    return out


def sparse(rounds: int, S: int = 8192) -> dict:
    """The sparse masks: the flash form's profile, and both sides' GFLOP/s on the scores each computes (flash: its
    bands' or tiles' scores; flex: its 128-key blocks that the mask does not skip)."""
    from attnlab.measure import flex

    g = torch.Generator().manual_seed(S)
    q, k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(3))
    out = {}
    for mask in (attnlab.masks.sliding_window(1024), packed_documents(S)):
        plan = flash.plan(q, k, v, attn_mask=mask)  # what the call does: its bands, or its tiles
        use_bands = plan.path == "bands"
        scores = (plan.bands.scores if use_bands else plan.tiles.scores()) * B * H  # (both count per head)
        row = {"path": "bands" if use_bands else "tiles", "scores": scores,
               "profile": profile_flash(q, k, v, flop=2 * scores * D, attn_mask=mask)}
        if flex.unavailable() is None:
            bq, bk = flex.block_size(mask, B, H, S, S, "cpu")
            with torch.no_grad():
                flex.attention(q, k, v, attn_mask=mask)
                t = per_call(lambda m=mask: flex.attention(q, k, v, attn_mask=m), rounds)
            flex_scores = blocks(mask.block_map(B, H, S, S, bq, bk, "cpu").kind, B * H) * bq * bk
            row["flex"] = {"ms": t * 1e3, "block": [bq, bk], "scores": flex_scores,
                           "gflops": 4 * flex_scores * D / t / 1e9}
        out[mask.name] = row
    return out


def blocks(kind: torch.Tensor, heads: int) -> int:
    """The blocks a block map does not skip, over every batch and head (its leading dims may broadcast)."""
    lead = 1
    for n in kind.shape[:-2]:
        lead *= n
    return int((kind != EMPTY).sum()) * heads // lead


def paired(calls: dict, rounds: int, grad: bool = False) -> dict:
    """Median ms of each call and the paired median of the first over the second, alternated rounds."""
    times = alternate(calls, rounds, grad)
    a, b = list(times)
    return {"median_ms": {n: statistics.median(t) * 1e3 for n, t in times.items()},
            "ratio": statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))}


def tanh_cost() -> dict:
    from attnlab.kernels import online

    g = torch.Generator().manual_seed(2)
    x0 = torch.randn(H, TILE, TILE, generator=g) * 3
    x, spare, times = x0.clone(), torch.empty_like(x0), 30.0 * online.LOG2E

    def five():  # clamp, x2, expm1, the denominator, the divide, then the cap: what the soft-cap ran before
        e = x.copy_(x0).clamp_(-20.0, 20.0).mul_(2.0).expm1_()
        e.div_(torch.add(e, 2.0, out=spare)).mul_(times)

    sides = {"copy alone": lambda: x.copy_(x0), "torch.tanh and a multiply": lambda: torch.tanh(x.copy_(x0), out=x)
             .mul_(times), "five-pass expm1 form": five,
             "online.tanh_": lambda: online.tanh_(x.copy_(x0), spare, times, doubled=True, clamp=False)}
    ns = {n: per_call(f, 300) * 1e9 / x0.numel() for n, f in sides.items()}
    return {n: t - ns["copy alone"] for n, t in ns.items() if n != "copy alone"}


def alibi_split(rounds: int) -> dict:
    out = {}
    for T, grad in ((8192, False), (4096, True)):
        g = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(B, H, T, D, generator=g).requires_grad_(grad) for _ in range(3))
        mod = attnlab.mods.alibi(H)

        def call(split, q=q, k=k, v=v, mod=mod, grad=grad):
            o = flash.attention(q, k, v, is_causal=True, score_mod=mod, split_heads=split)
            if grad:
                o.sum().backward()
        parts = flash.plan(q, k, v, is_causal=True, score_mod=mod).heads  # [P13] the runs of key heads
        out[f"{'forward + backward' if grad else 'forward'} T={T}"] = {
            **paired({"split": lambda c=call: c(True), "unsplit": lambda c=call: c(False)}, rounds, grad),
            "windows": [w for *_, w in parts if w is not None]}
    return out


def band_share(rounds: int, S: int = 8192) -> dict:
    from attnlab.kernels import flash_band

    g = torch.Generator().manual_seed(S)
    q, k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(3))
    out = {}
    for w in (1024, 2048):
        mask = attnlab.masks.sliding_window(w)
        band = flash_band.bands(mask, B, H, S, S, flash_band.BAND_BLOCK_Q)
        tiles = flash.Tiles(B, H, S, S, 256, 256, mask, None, "cpu", True)

        def bands(mask=mask):
            keep = flash_band.SHARE_OF_TILES
            flash_band.SHARE_OF_TILES = 10.0  # the bands whatever they cost
            try:
                attnlab.attention(q, k, v, impl="flash", attn_mask=mask)
            finally:
                flash_band.SHARE_OF_TILES = keep
        out[mask.name] = {**paired({"bands": bands, "tiles": lambda m=mask: attnlab.attention(
            q, k, v, impl="flash", attn_mask=m, bands=False)}, rounds), "share_of_scores": band.scores / tiles.scores(),
            "threshold": flash_band.SHARE_OF_TILES}
    return out


def decode(rounds: int, S: int = 32768) -> dict:
    g = torch.Generator().manual_seed(S)
    q = torch.randn(B, H, 1, D, generator=g)
    k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(2))
    calls = {"flash": lambda: attnlab.attention(q, k, v, impl="flash"),
             "F.sdpa": lambda: F.scaled_dot_product_attention(q, k, v)}
    times = alternate(calls, rounds * 3)
    return {"S": S, "median_ms": {n: statistics.median(t) * 1e3 for n, t in times.items()},
            "flash / sdpa": statistics.median(a / b for a, b in zip(times["flash"], times["F.sdpa"], strict=True))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="attnlab-out", help="folder for flash_levers-<processor>.json and .txt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=9, help="alternated rounds of the tile sizes (default 9)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    out = {"machine": machine(), "versions": versions(), "threads": args.threads,
           "config": {"batch": B, "heads": H, "T": T, "head_dim": D, "dtype": "float32", "tile": TILE},
           "load_average_before": os.getloadavg()}
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    say(f"{out['machine']['cpu']}, {args.threads} threads, load average before {out['load_average_before'][0]:.1f}")
    out["profile"] = prof = profile_flash(q, k, v)
    say(f"profile of flash, full T={T}: {prof['wall_ms_per_call']:.1f} ms a call; self time per call: " +
                 ", ".join(f"{n} {r['self_ms_per_call']:.1f} ms" + (f" ({r['gflops']:.0f} GFLOP/s)" if "gflops" in r
                                                                     else "") for n, r in prof["ops"].items()))
    out["compile"] = c = tile_step(args.rounds)
    say(f"one tile step ({H} x {TILE} x {TILE}): " + ", ".join(f"{n} {t:.0f} us" for n, t in c["us"].items())
                 + f"; compiled / eager {c['compiled / eager']:.2f}, compiling took {c['compile_s']:.1f} s")
    out["fused_sum"] = fs = fused_sum()
    say("row sums: " + ", ".join(f"{n} {t:.0f} us" for n, t in fs["us"].items())
                 + f"; fused / separate {fs['fused / separate']:.2f}")
    out["tiles"] = ts = tiles_vs_sdpa(q, k, v, args.rounds)
    for mask, rows in ts.items():
        say(f"tiles vs F.sdpa, {mask} T={T} (paired medians of {args.rounds} rounds): " + ", ".join(
            f"{n} {r['ratio_to_sdpa']:.2f}" for n, r in rows.items() if n != "F.sdpa")
            + f"  (F.sdpa {rows['F.sdpa']['median_ms']:.1f} ms)")
    out["sparse"] = sp = sparse(args.rounds)
    for name, row in sp.items():
        mm = {n: r["gflops"] for n, r in row["profile"]["ops"].items() if "gflops" in r}
        fx = row.get("flex")
        say(f"{name} T=8192 on the {row['path']}: {row['profile']['wall_ms_per_call']:.1f} ms, "
                     f"{row['scores'] / 1e6:.0f}M scores, matmuls " + ", ".join(f"{n} {g:.0f}" for n, g in mm.items())
                     + " GFLOP/s" + (f"; flex {fx['ms']:.1f} ms, {fx['scores'] / 1e6:.0f}M scores in blocks of "
                                     f"{fx['block'][0]} x {fx['block'][1]}, {fx['gflops']:.0f} GFLOP/s" if fx else ""))
    out["tanh_ns"] = tn = tanh_cost()
    say("the soft-cap's tanh, ns an element: " + ", ".join(f"{n} {t:.2f}" for n, t in tn.items()))
    out["alibi_split"] = al = alibi_split(max(3, args.rounds // 2))
    for name, r in al.items():
        say(f"ALiBi causal {name}: split {r['median_ms']['split']:.0f} ms, unsplit {r['median_ms']['unsplit']:.0f} ms,"
            f" split / unsplit {r['ratio']:.2f}; windows of {r['windows']} keys")
    out["band_share"] = bs = band_share(max(3, args.rounds // 2))
    for name, r in bs.items():
        say(f"{name} T=8192: bands {r['median_ms']['bands']:.0f} ms, tiles {r['median_ms']['tiles']:.0f} ms, bands / "
            f"tiles {r['ratio']:.2f}; the bands compute {r['share_of_scores']:.3f} of the tiles' scores (bands below "
            f"{r['threshold']})")
    out["decode"] = dec = decode(args.rounds)
    verdict = "met: below 1" if dec["flash / sdpa"] < 1 else "NOT met: the issue keeps it below 1"
    say(f"decode, one query against S={dec['S']} keys: flash {dec['median_ms']['flash']:.2f} ms, F.sdpa "
        f"{dec['median_ms']['F.sdpa']:.2f} ms, flash / sdpa {dec['flash / sdpa']:.2f} ({verdict})")
    finish(out, lines, args.out, f"flash_levers-{slug(out['machine']['cpu'])}", say)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
