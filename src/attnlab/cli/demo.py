"""`attnlab demo`: the single-head lesson script."""

from __future__ import annotations

from ._args import seed
from ._folder import add_force, add_out, keep_other_run, output_folder


def add_parser(sub):
    p = sub.add_parser("demo", help="check the forms against PyTorch, draw an attention map and the scale demo",
                       description="The single-head lesson script: max|mine - F.sdpa| for the matrix and loops "
                                   "forms, a causal attention map, and softmax saturation against head width.")
    add_out(p)
    p.add_argument("--seed", type=seed, default=0, help="random seed, 0 to 2**32 - 1 (default: 0)")
    add_force(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab import demo
    from attnlab.report import plots
    from attnlab.report.terminal import console
    from attnlab.results import write_json

    out = output_folder(args.out)  # a folder that cannot take files is a usage error now, not after the run
    keep_other_run(out / "demo.json", {"seed": args.seed}, lambda d: d, "the demo", args.force)
    r = demo.run(seed=args.seed)
    console.print(f"[bold]One head, T={r.T} tokens, d={r.d}, float32 (seed {r.seed})[/]")
    for c in r.checks:
        verdict = "[green]OK[/]" if c.ok else "[red]FAIL[/]"
        console.print(f"  {c.form:<6} causal={c.causal!s:<5}  max|mine - F.sdpa| = {c.max_err:.2e}  {verdict}"
                      f"   (vs float64: {c.oracle_err:.2e}, PyTorch's {c.torch_oracle_err:.2e})")
    at = r.peak_at(256)
    console.print(f"  d = 256: mean peak attention weight {at['none']:.2f} unscaled vs {at['sqrt']:.2f} scaled "
                  f"by 1/sqrt(d) ({at['inv']:.3f} with 1/d; uniform is {1 / r.scale_T:.3f})")
    for write in (lambda: plots.attention_map(r.map_weights, out / "attention_map.png"),
                  lambda: plots.scale_demo(r, out / "scale_demo.png"), lambda: write_json(r, out / "demo.json")):
        console.print(f"  wrote {write()}")  # each said as soon as it is whole: a full disk stops at the next
    return 0 if all(c.ok for c in r.checks) else 1
