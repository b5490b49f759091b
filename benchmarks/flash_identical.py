"""Is the flash form still bit for bit what it was? Save its outputs and gradients once, compare them later.

A change to how the flash form is *organised* (its plan, its loop, its modifier classes) must not change a single
bit of what it computes. This script runs ``attnlab.kernels.flash.attention`` on a fixed set of cases -- full,
causal, a sliding window on the key bands and on the tiles, documents, GQA, L != S both ways, bool and float
masks (the float one learnable), rows that see nothing, large logits (the running max), decoding (wide key tiles),
small tiles, dropout, the half-precision recipe, the fused score modifiers (soft-cap bounded and not, ALiBi with
its heads split, T5's bias, on the tiles and the bands), a modifier called as a function and ring attention on one
rank -- in float32, float64, bfloat16 and float16, and keeps the output, dq, dk, dv and every other gradient.

    python benchmarks/flash_identical.py save attnlab-out/flash_identical.pt    # on the code to compare against
    python benchmarks/flash_identical.py check attnlab-out/flash_identical.pt   # on the code under change

``check`` prints one line per case and tensor that differs, and a summary; it exits 1 if any bit differs. Both
run on one thread (a thread count changes how a sum is split) with the tile cache off (``ATTNLAB_TILES=off``).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ["ATTNLAB_TILES"] = "off"  # the default tile sizes, whatever this machine's `attnlab tune` cached

import torch  # noqa: E402

from attnlab import masks, mods  # noqa: E402
from attnlab.kernels import flash  # noqa: E402

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _docs(L: int) -> torch.Tensor:
    lengths, ids, i = [37, 90, 12, 64, 41], [], 0
    while len(ids) < L:
        ids += [i] * lengths[i % len(lengths)]
        i += 1
    return torch.tensor(ids[:L])


def cases() -> dict:
    """name -> (shape (N, H, Hkv, L, S, E), keyword arguments, what to do to q and k, learnable extras)."""
    window = masks.sliding_window(48)
    docs = masks.document(_docs(300))
    dead = torch.ones(300, 300, dtype=torch.bool)
    dead[5] = False  # a row that sees no key
    dead[:, 7] = False
    return {
        "full": ((2, 4, 4, 300, 300, 40), {}, None),
        "causal": ((2, 4, 4, 300, 300, 40), {"is_causal": True}, None),
        "window-bands": ((2, 4, 4, 300, 300, 40), {"attn_mask": window}, None),
        "window-tiles": ((2, 4, 4, 300, 300, 40), {"attn_mask": window, "bands": False, "block_q": 64,
                                                    "block_k": 64}, None),
        "documents": ((2, 4, 4, 300, 300, 40), {"attn_mask": docs}, None),
        "documents-tiles": ((2, 4, 4, 300, 300, 40), {"attn_mask": docs, "bands": False, "block_q": 48,
                                                       "block_k": 64}, None),
        "gqa-causal": ((2, 4, 2, 300, 300, 40), {"is_causal": True, "enable_gqa": True}, None),
        "gqa-window": ((2, 4, 2, 300, 300, 40), {"attn_mask": window, "enable_gqa": True}, None),
        "L<S": ((2, 4, 4, 100, 300, 40), {}, None),
        "L>S-causal": ((2, 4, 4, 300, 100, 40), {"is_causal": True}, None),
        "L<S-lower-right": ((2, 4, 4, 100, 300, 40), {"attn_mask": masks.causal_lower_right()}, None),
        "bool-mask-dead-rows": ((2, 4, 4, 300, 300, 40), {"attn_mask": dead}, None),
        "float-mask-learnable": ((2, 4, 4, 300, 300, 40), {"attn_mask": "float"}, None),
        "large-logits": ((2, 4, 4, 300, 300, 40), {"is_causal": True}, "large"),
        "large-logits-bands": ((2, 4, 4, 300, 300, 40), {"attn_mask": window}, "large"),
        "some-tiles-bounded": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "block_q": 64}, "first rows large"),
        "decode": ((2, 4, 2, 1, 3000, 40), {"enable_gqa": True}, None),
        "small-tiles": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "block_q": 32, "block_k": 48}, None),
        "dropout": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "dropout_p": 0.3, "block_q": 64}, None),
        "softcap-bounded": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "score_mod": mods.softcap(30.0)}, None),
        "softcap-unbounded": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "score_mod": mods.softcap(50.0)},
                              "large"),
        "softcap-window": ((2, 4, 4, 300, 300, 40), {"attn_mask": window, "score_mod": mods.softcap(20.0)}, None),
        "alibi-split": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "score_mod": "alibi"}, None),
        "alibi-window": ((2, 4, 2, 300, 300, 40), {"attn_mask": window, "enable_gqa": True, "score_mod": "alibi"},
                         None),
        "alibi-tiles": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "score_mod": "alibi", "split_heads": False,
                                                  "block_q": 64, "block_k": 64}, None),
        "t5-causal": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "score_mod": "t5"}, None),
        "t5-window": ((2, 4, 4, 300, 300, 40), {"attn_mask": window, "score_mod": "t5"}, None),
        "t5-documents-long": ((1, 4, 4, 2560, 2560, 16), {"attn_mask": masks.document(_docs(2560)),
                                                           "score_mod": "t5"}, None),
        "t5-full-tiles": ((2, 4, 4, 300, 300, 40), {"score_mod": "t5", "block_q": 64, "block_k": 32}, None),
        "function-mod": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "score_mod": "function"}, None),
        "compose": ((2, 4, 4, 300, 300, 40), {"is_causal": True, "score_mod": "compose"}, None),
    }


def _mod(kind, H: int, dtype):
    """A fresh modifier and its learnable tensors (made per case, so that gradients start at zero)."""
    if kind == "alibi":
        slopes = torch.tensor([2.0, 1.0, 0.25, 0.01][:H], dtype=torch.float64, requires_grad=True)
        return mods.alibi(slopes=slopes), {"dslopes": slopes}
    if kind == "t5":
        table = (torch.randn(H, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
                 ).requires_grad_(True)
        return mods.relative_bias(table, max_distance=64), {"dtable": table}
    if kind == "function":
        w = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)

        def tilt(score, b, h, q_idx, kv_idx):
            return score + (w * (kv_idx - q_idx)).to(score.dtype) / 16

        return mods.Mod.from_fn(tilt), {"dw": w}
    if kind == "compose":
        return mods.compose(mods.alibi(H), mods.softcap(25.0)), {}
    return kind, {}


def run_case(shape, kw: dict, scaled, dtype: torch.dtype, half) -> dict:
    """The case's output and every gradient, computed by the flash form as the code now stands."""
    N, H, Hkv, L, S, E = shape
    g = torch.Generator().manual_seed(sum(shape))
    q, k, v, do = (torch.randn(*s, generator=g, dtype=torch.float64)
                   for s in ((N, H, L, E), (N, Hkv, S, E), (N, Hkv, S, E), (N, H, L, E)))
    if scaled == "large":
        q, k = q * 5, k * 3
    elif scaled == "first rows large":  # the first query tile takes the running max, the others the bounded path
        q[:, :, :64] *= 6
    q, k, v, do = (t.to(dtype) for t in (q, k, v, do))
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    kw = dict(kw)
    extra = {}
    if kw.get("attn_mask") == "float":
        bias = (torch.randn(1, H, L, S, generator=g, dtype=torch.float64) * 0.5).to(dtype).requires_grad_(True)
        kw["attn_mask"], extra = bias, {"dbias": bias}
    if isinstance(kw.get("score_mod"), str):
        kw["score_mod"], extra = _mod(kw["score_mod"], H, dtype)
    if half is not None:
        kw["half_matmuls"] = half
    torch.manual_seed(0)  # the dropout seed
    out = flash.attention(q, k, v, **kw)
    out.backward(do)
    got = {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}
    got.update({name: t.grad for name, t in extra.items()})
    return got


def run_ring(dtype: torch.dtype) -> dict:
    """Ring attention on one rank (its forward and backward call the flash form's tile loops)."""
    import torch.distributed as dist

    from attnlab.kernels import ring

    if not dist.is_initialized():
        from attnlab.distributed.launch import free_port

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    got = {}
    for name, causal, Hkv in (("ring-causal-gqa", True, 2), ("ring-full", False, 4)):
        g = torch.Generator().manual_seed(7)
        q, k, v, do = (torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)
                       for s in ((2, 4, 200, 40), (2, Hkv, 200, 40), (2, Hkv, 200, 40), (2, 4, 200, 40)))
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))
        out = ring.attention(q, k, v, is_causal=causal, enable_gqa=True, block_q=64, block_k=48)
        out.backward(do)
        got[name] = {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}
    return got


def run_all(dtypes: list[str]) -> dict:
    results = {}
    for dname in dtypes:
        dtype = DTYPES[dname]
        halves = (None, False) if dtype in (torch.bfloat16, torch.float16) else (None,)
        for half in halves:
            for name, (shape, kw, scaled) in cases().items():
                label = f"{name} {dname}" + ("" if half is None else f" half_matmuls={half}")
                results[label] = run_case(shape, kw, scaled, dtype, half)
        if dtype in (torch.float32, torch.float64):
            results.update({f"{n} {dname}": r for n, r in run_ring(dtype).items()})
    return results


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Bit for bit (NaN included): the same dtype, shape and bits."""
    if a is None or b is None:
        return a is None and b is None
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(BITS[a.dtype]), b.contiguous().view(BITS[b.dtype]))


def compare(saved: dict, now: dict) -> int:
    differ = 0
    for label, want in saved.items():
        got = now.get(label)
        if got is None:
            print(f"MISSING  {label}")
            differ += 1
            continue
        bad = [name for name in want if not _same(want[name], got.get(name))]
        for name in bad:
            w, g = want[name], got.get(name)
            gap = float((w.double() - g.double()).abs().max()) if g is not None and w.shape == g.shape else "n/a"
            print(f"DIFFERS  {label}: {name} (max |difference| {gap})")
        if not bad:
            print(f"same     {label}: {', '.join(want)}")
        differ += bool(bad)
    print(f"{len(saved) - differ} of {len(saved)} cases bit-identical")
    return differ


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["save", "check"])
    p.add_argument("path")
    p.add_argument("--dtypes", default="float32,float64,bfloat16,float16")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    now = run_all(args.dtypes.split(","))
    if args.action == "save":
        os.makedirs(os.path.dirname(os.path.abspath(args.path)), exist_ok=True)
        torch.save(now, args.path)
        print(f"saved {len(now)} cases to {args.path}")
        return 0
    return 1 if compare(torch.load(args.path), now) else 0


if __name__ == "__main__":
    sys.exit(main())
