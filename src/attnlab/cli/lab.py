"""`attnlab lab`: the learner's own attention. `lab start` writes the starter; `lab check` grades and measures it."""

from __future__ import annotations

from ._args import seconds, seed
from ._folder import add_out, output_folder


def add_parser(sub):
    p = sub.add_parser("lab", help="the lab: write attention yourself, then have it graded and measured",
                       description="`attnlab lab start [DIR]` writes attention_lab.py (attention_by_hand with TODOs, "
                                   "level 1; `--level NAME` writes a later level's); "
                                   "`attnlab lab check FILE[:FUNCTION]` grades your function against a float64 "
                                   "oracle and PyTorch, says the likely cause of what "
                                   "fails, measures its time and memory at T = 128, 512, 2048 and writes the result "
                                   "as JSON, which `attnlab lesson` reads.")
    what = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    s = what.add_parser("start", help="write attention_lab.py into DIR (never over a file already there)")
    s.add_argument("dir", nargs="?", default=".", metavar="DIR", help="folder for the starter (default: here)")
    levels_help = ("the lab's level: 1 loops, 2 matrix, 3 module, 4 flash, 5 backward, 6 decode, 7 triton (by name "
                   "or number; "
                   "default: loops; for check, the level FILE:FUNCTION names, or with FILE alone the level whose "
                   "starter has that file name, else the one level function the file defines)")
    s.add_argument("--level", metavar="NAME", help=levels_help)
    c = what.add_parser("check", help="grade and measure your function")
    c.add_argument("spec", metavar="FILE[:FUNCTION]", help="your file, and the function in it (default: "
                                                           "attention_by_hand)")
    c.add_argument("--level", metavar="NAME", help=levels_help)
    c.add_argument("--quick", action="store_true", help="leave out the longest case (L = 1025)")
    c.add_argument("--seed", type=seed, default=0, help="random seed of the inputs (default: 0)")
    c.add_argument("--max-seconds", type=seconds, default=None, metavar="N",
                   help="the most one length's measurement may take; a length estimated to take longer is skipped, "
                        "with its estimate (default: 20; a loops version needs a few hundred to reach T = 2048)")
    add_out(c, "output folder; every check is kept in its lab-checks/ as FILE-FUNCTION-TIME.json and .png")
    p.set_defaults(run=run)


def run(args) -> int:
    from . import UsageError

    if args.action == "start":
        return start(args)
    if args.action == "check":
        return check(args)
    raise UsageError("say what to do: `attnlab lab start [DIR]` or `attnlab lab check FILE[:FUNCTION]`")


def _level(args):
    """The level said with --level (None when it was not said); a UsageError naming the levels if there is none."""
    from attnlab.lab import levels

    from . import UsageError

    if args.level is None:
        return None
    try:
        return levels.find(args.level)
    except levels.NoSuchLevel as e:
        raise UsageError(f"--level: {e}") from None


def start(args) -> int:
    from pathlib import Path

    from attnlab.lab import files
    from attnlab.report.terminal import console
    from attnlab.results.files import CannotWrite

    from . import UsageError

    level = _level(args)
    if not args.dir.strip():  # Path("") is the current folder: an empty name must not quietly mean "here"
        raise UsageError("lab start DIR: an empty folder name; give a folder, or leave DIR out for this one")
    if level is not None and level.number > 1:
        return _start_level(args, level)
    there = Path(args.dir) / files.STARTER_NAME
    empty = there.is_file() and there.stat().st_size == 0  # no one's work: written over
    try:
        s = files.start(args.dir)
    except CannotWrite as e:  # a full disk: no file is left behind, so the next run tries again
        raise UsageError(f"cannot write {e.path}: {e.reason}; no file was left, run it again when there is room") \
            from None
    except (files.LoadError, OSError) as e:
        raise UsageError(f"cannot write the starter into {args.dir}: {getattr(e, 'strerror', None) or e}") from None
    if not s.written:
        console.print(f"{s.path} is already there: it is yours, so it was left as it is. Check it with\n"
                      f"  attnlab lab check {s.path}")
        return 0
    over = " over the empty file that was there" if empty else ""
    console.print(f"wrote {s.path}{over}. Open it: attention_by_hand has four TODOs (the scale, the causal mask, a "
                  "stable softmax, the output's dtype).\nAfter each one, run\n"
                  f"  attnlab lab check {s.path}\n"
                  "It grades your function against a float64 oracle and PyTorch, says what failed and the likely "
                  "cause, then measures its time and memory at T = 128, 512 and 2048.")
    return 0


def _start_level(args, level) -> int:
    from attnlab.lab import files
    from attnlab.report.terminal import console
    from attnlab.results.files import CannotWrite

    from . import UsageError

    try:
        s = files.start(args.dir, level)
    except CannotWrite as e:
        raise UsageError(f"cannot write {e.path}: {e.reason}; no file was left, run it again when there is room") \
            from None
    except (files.LoadError, OSError) as e:
        raise UsageError(f"cannot write the starter into {args.dir}: {getattr(e, 'strerror', None) or e}") from None
    if not s.written:
        console.print(f"{s.path} is already there: it is yours, so it was left as it is. Check it with\n"
                      f"  attnlab lab check {s.path}")
        return 0
    todos = level.with_todos()
    console.print(f"wrote {s.path}: level {level.number}, {level.title}. Open it: {' and '.join(todos)} "
                  f"{'has its' if len(todos) == 1 else 'have their'} TODOs, "
                  f"and the docstring at the top of the file says what the check asks.\nAfter each one, run\n"
                  f"  attnlab lab check {s.path}")
    return 0


def check(args) -> int:
    from attnlab.lab import files, judged, measure, store
    from attnlab.lab.check import check as run_check
    from attnlab.lab.check import count
    from attnlab.report import exercise
    from attnlab.report.terminal import console, progress
    from attnlab.results import write_json
    from attnlab.results.files import CannotWrite

    from . import UsageError, _clock

    level = _level(args)
    out = output_folder(args.out)
    try:  # loaded in a process of its own, never in this one
        learner = judged.open_learner(args.spec, None if level is None else level.name)
    except files.LoadError as e:
        raise UsageError(str(e)) from None
    with learner:
        n = count(learner, args.quick)
        console.print(f"[bold]attnlab lab check[/] {learner.path}:{learner.name}")
        with progress(n, "cases") as advance:
            result = run_check(learner, quick=args.quick, seed=args.seed, progress=advance,
                               on_stage=lambda text: console.print(f"  {text}"),
                               budget_s=args.max_seconds or measure.BUDGET_S)
    if learner.fn.strays:
        console.print("  your file left processes of its own running (started at import or in a call): they were "
                      "ended with the check")
    for line in exercise.lines(result):
        console.print(line)
    try:  # every check kept: lab-checks/STEM-FUNCTION-TIME.json, the figure beside it
        result.seconds = _clock.waited()  # what the learner waited: the whole command, its start and imports too
        saved = store.save(result, out)
        figure = exercise.figure(result, saved.with_suffix(".png"))
        result.seconds = _clock.waited()  # ... and the figure: the JSON says the wait up to its last file
        write_json(result, saved)
        for f in (saved, figure):
            console.print(f"  wrote {f}")
    except CannotWrite as e:  # the verdict is printed above; the results folder's problem is one line
        raise UsageError(f"the check's result was not kept: cannot write {e.path}: {e.reason}") from None
    except OSError as e:
        raise UsageError(f"the check's result was not kept in {out}: {e.strerror or e}") from None
    return 0 if store.passed(result) else 1
