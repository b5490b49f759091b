"""The flash form's float32 error against PyTorch's own float32 error, over many seeds, where it was largest.

    .venv/bin/python benchmarks/flash_float32_accuracy.py [--seeds 200] [--forms flash,matrix] [--out DIR]

For each case and seed: the float64 oracle's answer, PyTorch's float32 error against it, and each form's;
the ratio form error / PyTorch error per quantity (out, dq, dk, dv) and whether the tolerance rule
(judge/oracle.py: error <= 2 x PyTorch's + the rounding floor) holds. Cases, after FlashAttention's 2x rule:
large logits (q x 5, k x 3, few keys), dropout (PyTorch measured without dropout, the form against the
oracle with the form's own keep-mask), causal with a sliding window. Writes DIR/flash_float32_accuracy.json
with the worst ratio and every failure; prints a line per case and form.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import attnlab
from attnlab import masks
from attnlab.judge import oracle, rule
from attnlab.kernels import dropout
from attnlab.results import machine, versions

QUANTITIES = ("out", "dq", "dk", "dv")
CASES = {  # name: (N, H, L, S, E, q scale, k scale, mask, dropout_p)
    "large logits, S=2": (2, 2, 16, 2, 32, 5.0, 3.0, None, 0.0),
    "large logits, S=5": (2, 2, 16, 5, 32, 5.0, 3.0, None, 0.0),
    "dropout 0.3": (2, 2, 33, 33, 16, 1.0, 1.0, None, 0.3),
    "causal & window 5": (2, 2, 40, 40, 16, 1.0, 1.0, masks.sliding_window(5), 0.0),
}


def one(name: str, seed: int, forms: list[str]) -> dict:
    N, H, L, S, E, qs, ks, mask, p = CASES[name]
    g = torch.Generator().manual_seed(seed)
    q, k, v, go = (torch.randn(*s, generator=g) for s in ((N, H, L, E), (N, H, S, E), (N, H, S, E), (N, H, L, E)))
    q, k = q * qs, k * ks
    dense = None if mask is None else mask.dense(N, H, L, S)

    def grads(fn, **kw):
        ins = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*ins, **kw)
        out.backward(go)
        return [out, *(t.grad for t in ins)]

    theirs = grads(F.scaled_dot_product_attention, attn_mask=dense)
    plain = oracle.reference(q, k, v, dense, grad_out=go)
    keep = None
    if p > 0:
        torch.manual_seed(seed)
        keep = dropout.keep_mask(dropout.draw_seed(), p, N, H, torch.arange(L), torch.arange(S))
    ref = oracle.reference(q, k, v, dense, grad_out=go, keep=keep, dropout_p=p)
    floor = rule.rounding_floor(q, k, v, dense, grad_out=go, keep=keep, dropout_p=p, dtype=torch.float32)
    res = {}
    for form in forms:
        torch.manual_seed(seed)  # the form draws the same dropout seed as keep above
        mine = grads(lambda *x, _f=form: attnlab.attention(*x, attn_mask=mask, dropout_p=p, impl=_f))
        res[form] = {}
        for n, m, t, r, rp in zip(QUANTITIES, mine, theirs, ref, plain, strict=True):
            c = rule.compare(n, m, t, r, torch.float32, floor[n], theirs_ref=rp)
            res[form][n] = {"err": c.err, "torch_err": c.torch_err, "ratio": c.err / max(c.torch_err, 1e-30),
                            "passed": c.passed}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--forms", default="flash,matrix")
    ap.add_argument("--out", type=Path, default=Path("attnlab-out"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    forms = args.forms.split(",")
    print(f"{len(CASES)} cases x {args.seeds} seeds x {len(forms)} forms, float32, against the float64 oracle")
    summary = []
    for name in CASES:
        rows = [one(name, s, forms) for s in range(args.seeds)]
        for form in forms:
            worst = {n: max(r[form][n]["ratio"] for r in rows) for n in QUANTITIES}
            fails = [(s, n) for s, r in enumerate(rows) for n in QUANTITIES if not r[form][n]["passed"]]
            summary.append({"case": name, "form": form, "seeds": args.seeds, "worst_ratio": worst,
                            "failures": [{"seed": s, "quantity": n, **rows[s][form][n]} for s, n in fails]})
            print(f"{name:20s} {form:7s} worst error / PyTorch's: "
                  + " ".join(f"{n} {w:4.2f}" for n, w in worst.items()) + f"   rule failed {len(fails)} times",
                  flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "flash_float32_accuracy.json"
    path.write_text(json.dumps({"machine": machine(), "versions": versions(), "cases": summary}, indent=1))
    print(f"wrote {path}")
    return 1 if any(s["failures"] for s in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
