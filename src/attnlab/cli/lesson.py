"""`attnlab lesson`: build the lesson page -- one HTML file, offline, with this machine's numbers."""

from __future__ import annotations

from ._folder import add_out, output_folder, seed


def add_parser(sub):
    p = sub.add_parser("lesson", help="build the interactive lesson page (one offline HTML file)",
                       description="Build lesson.html in the output folder: the model from `attnlab train` (or a "
                                   "seeded one) running live in the page on any text you type, every step of one "
                                   "head with its code, the head view, and the results of demo, bench, train and "
                                   "explore -- read from their JSON in the folder when present, otherwise quick runs.")
    add_out(p, "output folder, read and written")
    p.add_argument("--open", action="store_true", help="open the page in the default browser when it is built")
    p.add_argument("--quick", action="store_true", help="smallest quick runs for missing results; no training")
    p.add_argument("--seed", type=seed, default=0, help="random seed for the seeded model and quick runs (default: 0)")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.lab.lesson import collect
    from attnlab.report.lesson import build
    from attnlab.report.terminal import console

    from . import UsageError

    out = output_folder(args.out)
    try:
        data = collect(out, quick=args.quick, seed=args.seed, log=lambda m: console.print(f"  {m}"))
    except ValueError as e:  # a broken results file or an unreadable checkpoint in the folder
        raise UsageError(str(e)) from None
    for part in (data.demo, data.bench, data.train_scale, data.train_tie_kv):
        how = "" if part.origin == "file" else f" ({part.origin})"
        console.print(f"  {part.name}{how}: {part.note}")
    path = build(data, out / "lesson.html")
    console.print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB, {data.seconds:.1f} s)")
    if args.open:
        import webbrowser

        url = path.resolve().as_uri()
        if not webbrowser.open(url):
            console.print(f"no browser could be started here; open {url} yourself")
    return 0
