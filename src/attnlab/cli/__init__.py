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
    from . import _clock

    _clock.begin(whole_process=argv is None)  # the command is the process when its arguments are the process's
    code = _main(argv)
    if argv is None and _clock.ends_at_once(sys.argv[1:2]):
        _clock.end(code)  # (what the learner waits for ends with the command: not torch's teardown, which takes
        # 3 to 60 s on a busy machine after the check said what it took)
    return code


def _main(argv: list[str] | None) -> int:
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
    except KeyboardInterrupt:
        print(f"attnlab {args.command}: interrupted", file=sys.stderr)
        return 130
    except ImportError as e:  # an optional dependency (the 'lab' extra) is not installed
        from attnlab._extras import missing

        if missing(e) is None:
            raise
        print(f"attnlab {args.command}: error: {missing(e)}", file=sys.stderr)
        return 2


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
