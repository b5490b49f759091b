"""`attnlab explore [NAME]`: the lesson's things to try, as experiments that print what they found."""

from __future__ import annotations

from ._args import seed
from ._folder import add_force, add_out, keep_other_run, output_folder


def add_parser(sub):
    p = sub.add_parser("explore", help="run one of the lesson's experiments (no name: list them)",
                       description="Run one of the lesson's things to try: it prints its finding with the numbers "
                                   "and writes explore-NAME.png and explore-NAME.json. Without a name, list them; "
                                   "'all' runs every one.")
    p.add_argument("name", nargs="?", help="experiment to run, or 'all'")
    add_out(p)
    p.add_argument("--seed", type=seed, default=0, help="random seed (default: 0)")
    add_force(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab import explore
    from attnlab.report.explore import figure
    from attnlab.report.terminal import console
    from attnlab.results import write_json

    from . import UsageError

    if args.name is None:
        console.print("[bold]attnlab explore NAME[/]  (or 'all'): the lesson's things to try")
        for e in explore.EXPERIMENTS.values():
            console.print(f"  {e.name:<15} {e.summary}")
        return 0
    if args.name != "all" and args.name not in explore.EXPERIMENTS:
        raise UsageError(f"unknown experiment {args.name!r}; choose one of: {', '.join(explore.EXPERIMENTS)}, all")
    out = output_folder(args.out)
    names = list(explore.EXPERIMENTS) if args.name == "all" else [args.name]
    for name in names:  # before any runs: a refusal leaves every file as it was
        keep_other_run(out / f"explore-{name}.json", {"seed": args.seed}, lambda d: d, f"experiment {name}",
                       args.force)
    for name in names:
        e = explore.get(name)
        r = e.run(seed=args.seed)
        console.print(f"[bold]{name}[/]: {e.finding(r)}")
        console.print(f"  wrote {figure(name, r, out / f'explore-{name}.png')}")  # each as soon as it is whole
        console.print(f"  wrote {write_json(r, out / f'explore-{name}.json')}")
    return 0
