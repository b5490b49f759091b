"""`attnlab lesson`: build the lesson page -- one HTML file, offline, with this machine's numbers."""

from __future__ import annotations

from ._args import seed
from ._folder import add_out, output_folder


def add_parser(sub):
    p = sub.add_parser("lesson", help="build the interactive lesson page (one offline HTML file)",
                       description="Build lesson.html in the output folder: the model from `attnlab train` (or a "
                                   "seeded one) running live in the page on any text you type, every step of one "
                                   "head with its code, the head view, and the results of demo, bench, train and "
                                   "explore -- read from their JSON in the folder when present, otherwise quick runs.")
    add_out(p, "output folder, read and written")
    p.add_argument("--open", action="store_true", help="open the page in the default browser when it is built")
    p.add_argument("--quick", action="store_true", help="smallest quick runs for missing results; no training")
    p.add_argument("--build", action="store_true",
                   help="first run the commands whose results are missing or stale (demo, bench, train, the tie-kv "
                        "ablation, explore, explore sinks), saying beforehand how long they will take, then build the "
                        "page; a line per step, in lesson-build.log too")
    p.add_argument("--seed", type=seed, default=0, help="random seed for the seeded model and quick runs (default: 0)")
    p.add_argument("--model", metavar="NAME_OR_PATH",
                   help="a pretrained causal LM instead (a Hugging Face hub name or a local folder; needs "
                        "attnlab[hf]): writes lesson-NAME.html with its tokens, every head's weights and statistics "
                        "and the head that links 'it' to 'animal', measured when the page is built")
    p.add_argument("--text", help="with --model: a second text to measure besides the lesson sentence")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.lesson import collect
    from attnlab.report.lesson import build
    from attnlab.report.terminal import console, escape
    from attnlab.report.train import train_progress

    from . import UsageError

    if args.text is not None and args.model is None:
        raise UsageError("--text goes with --model; the built-in model's page reads any text you type in it")
    if args.build and (args.quick or args.model is not None):
        raise UsageError(f"--build runs the full measurements for the built-in lesson; it does not go with "
                         f"{'--quick' if args.quick else '--model'}")
    if args.model is not None and not args.model.strip():
        raise UsageError("--model needs a Hugging Face hub name or a local folder, got an empty name")
    out = output_folder(args.out)
    if args.model is not None:
        return run_model(args, out)
    if args.build:
        from ._lesson_build import build_steps

        steps_log = build_steps(out)  # Ctrl-C in a step: Stopped, said with how to go on
    from attnlab.lesson import build as lesson_build

    line = lesson_build.versions_line(lesson_build.other_versions(out), "the page shows them as they are (their "
                                      "commands, or `attnlab lesson --build`, make them again with this version)")
    if line:  # said before they are read
        console.print(f"  {escape(line)}")
    try:
        data = collect(out, quick=args.quick, seed=args.seed, log=lambda m: console.print(f"  {escape(m)}"),
                       progress=train_progress)
    except ValueError as e:  # a broken results file or an unreadable checkpoint in the folder
        raise UsageError(str(e)) from None
    for part in (data.demo, data.bench, data.train_scale, data.train_tie_kv):
        how = "" if part.origin == "file" else f" ({part.origin})"
        console.print(f"  {part.name}{how}: {part.note}")
    path = build(data, out / "lesson.html")
    console.print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB, {data.seconds:.1f} s)")
    if args.build:
        steps_log.finish(data.seconds)
    _open(path, args.open)
    return 0


def run_model(args, out) -> int:
    """`lesson --model`: the page of a pretrained model's heads, and its numbers as JSON beside it."""
    from attnlab.lesson.pretrained import collect_model, slug
    from attnlab.nn import hf
    from attnlab.report.lesson.pretrained import build
    from attnlab.report.terminal import console
    from attnlab.results import write_json

    from . import UsageError

    try:
        transformers = hf.require("transformers")
    except hf.MissingExtra as e:
        raise UsageError(str(e)) from None
    transformers.utils.logging.disable_progress_bar()  # this command says what it loads; stderr keeps errors only
    transformers.utils.logging.set_verbosity_error()
    import huggingface_hub  # installed with transformers; its retries offline would fill stderr

    huggingface_hub.utils.logging.set_verbosity_error()
    try:
        lesson = collect_model(args.model, args.text, log=lambda m: console.print(f"  {m}"))
    except (OSError, ValueError) as e:  # no such model, not a causal LM, text the tokenizer maps to nothing
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(first if args.model in first else f"--model {args.model}: {first}") from None
    for t in lesson.texts:
        mh = t.heads
        found = (f"most weight from {mh.query_word!r} on {mh.key_word!r}: layer {mh.best_layer} head {mh.best_head} "
                 f"({mh.best_weight:.3f})" if mh.best_layer is not None else
                 f"no {mh.key_word!r} followed by {mh.query_word!r} to measure")
        console.print(f"  {len(mh.tokens)} tokens in {mh.text!r}; {found}")
    name = f"lesson-{slug(args.model)}"
    path = build(lesson, out / f"{name}.html")
    write_json(lesson, out / f"{name}.json")
    console.print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB, {lesson.seconds:.1f} s) and {name}.json")
    _open(path, args.open)
    return 0


def _open(path, wanted: bool) -> None:
    from attnlab.report.terminal import console

    if wanted:
        import webbrowser

        url = path.resolve().as_uri()
        if not webbrowser.open(url):
            console.print(f"no browser could be started here; open {url} yourself")
