"""Floor 5: the command line. Thin: parse arguments, call lab, hand results to report, print.

Each command lives in its own small module with ``add_parser(subparsers)`` and ``run(args)``;
adding a command is one module and one line in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import sys

COMMANDS = ["demo", "verify", "bench", "explore", "lesson", "lab", "train", "sample", "ring", "tune"]


class UsageError(Exception):
    """Bad input from the command line: printed as one line on stderr, exit code 2."""


STOPPED = 130  # the exit code of a command that Ctrl-C stopped (a shell's 128 + SIGINT): never a failure


class Stopped(Exception):
    """Ctrl-C stopped the command. Said as one line on stderr, ``attnlab COMMAND: stopped (Ctrl-C) WHERE; HOW``
    (``where``: how far it got, such as "at step 7 of sqrt"; ``how``: what was kept and how to go on), exit 130."""

    def __init__(self, how: str, where: str = ""):
        super().__init__(how)
        self.how, self.where = how, where


# What a command that Ctrl-C stopped without saying more keeps, and how to go on (a command that keeps more says it
# itself, raising Stopped): nothing is written before the end of these.
AGAIN = "nothing was kept: run it again"
ON_STOP = {
    "lesson": "the page is written at the end: run it again",
    "demo": "nothing was kept (the figures and demo.json are written at the end): run it again",
    "lab": "nothing was kept (a check is saved in lab-checks/ when it is done): run it again",
    "sample": "run it again for the whole text (the same --seed draws the same characters)",
    "ring": "nothing was kept (--json is written at the end): run it again",
    "tune": "the tile cache is as it was (the choice is saved at the end): run it again",
}


def stopped_line(command: str, how: str, where: str = "") -> str:
    """The one line a command that Ctrl-C stopped says on stderr."""
    named = f"attnlab {command}" if command else "attnlab"
    return f"{named}: stopped (Ctrl-C){' ' + where if where else ''}{'; ' + how if how else ''}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    from attnlab import __version__

    parser = _Parser(prog="attnlab", description="Learn, verify and measure scaled dot-product attention.")
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"attnlab.cli.{name.replace('-', '_')}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from attnlab._starting import release

    from . import _clock

    release()  # started: a Ctrl-C from here on is the command's to say (see attnlab._starting)

    _clock.begin(whole_process=argv is None)  # the command is the process when its arguments are the process's
    code = _main(argv)
    if argv is None and _clock.ends_at_once(sys.argv[1:2]):
        _clock.end(code)  # (what the learner waits for ends with the command: not torch's teardown, which takes
        # 3 to 60 s on a busy machine after the check said what it took)
    return code


_depth = 0  # commands running in this process: a command run by another (lesson --build's steps) is 2


def _main(argv: list[str] | None) -> int:
    global _depth
    _depth += 1
    try:
        return _command(argv)
    except KeyboardInterrupt:  # before the command began (its arguments read, its modules imported)
        if _depth == 1:
            print(stopped_line(_named(argv), AGAIN), file=sys.stderr)
        return STOPPED
    finally:
        _depth -= 1


def _named(argv: list[str] | None) -> str:
    """The command that ``argv`` (None: the process's own arguments) names, as the line says it."""
    words = sys.argv[1:] if argv is None else argv
    return next((w for w in words if w in COMMANDS), "")


def _command(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from attnlab.results.files import CannotWrite

    _warn_in_one_line(args.command)
    try:
        return int(args.run(args) or 0)
    except (UsageError, CannotWrite) as e:  # bad input, or a file that could not be written (a full disk)
        print(f"attnlab {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (Stopped, KeyboardInterrupt) as e:  # the learner's stop, wherever it landed: never a failure
        if _depth == 1:  # a step of another command: that command says how to go on
            line = stopped_line(args.command, e.how, e.where) if isinstance(e, Stopped) else stopped_line(
                args.command, _on_stop(args))
            print(line, file=sys.stderr)
        return STOPPED
    except ImportError as e:  # an optional dependency (the 'lab' extra) is not installed
        from attnlab._extras import missing

        if missing(e) is None:
            raise
        print(f"attnlab {args.command}: error: {missing(e)}", file=sys.stderr)
        return 2


def _on_stop(args) -> str:
    """What a command that Ctrl-C stopped where it says nothing itself keeps, and how to go on: its module's
    ``on_stop(args)`` where it has one, else :data:`ON_STOP`."""
    import importlib

    module = importlib.import_module(f"attnlab.cli.{args.command}")
    try:
        return module.on_stop(args) if hasattr(module, "on_stop") else ON_STOP.get(args.command, AGAIN)
    except Exception:  # noqa: BLE001 -- what was kept could not be read: the stop is said all the same
        return AGAIN


def _warn_in_one_line(command: str) -> None:
    """attnlab's own warnings (a tile cache refused) as one line on stderr; everyone else's as Python shows them."""
    import warnings

    from attnlab.kernels.tuned import RefusedSizes

    show = warnings.showwarning

    def one_line(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RefusedSizes):
            print(f"attnlab {command}: warning: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = one_line
