"""`attnlab tune`: measure the flash form's tile sizes on this processor and cache the fastest."""

from __future__ import annotations

from . import UsageError, _args
from ._folder import json_folder, save_json


def add_parser(sub):
    p = sub.add_parser("tune", help="time the flash form's tile sizes on this processor and keep the fastest",
                       description="Time candidate tile sizes of the flash form (dense tiles at T = 2048 and 8192, "
                                   "the bands of sliding windows of 256 and 512 at 8192) side by side "
                                   "with the defaults, in alternated rounds, and keep a candidate only where it is "
                                   "faster by the margin. The choice is cached for this processor, thread count "
                                   "and torch version (~/.cache/attnlab/tiles.json, or the file ATTNLAB_TILES "
                                   "names), and every later flash call without block sizes of its own uses it. "
                                   "Takes about 40 s on 2 cores; run it on a quiet machine.")
    p.add_argument("--threads", type=_args.threads, help="torch threads to tune for (default: PyTorch's choice)")
    p.add_argument("--rounds", type=int, default=5, help="alternated rounds per problem (default: 5)")
    p.add_argument("--margin", type=float, default=0.05,
                   help="keep a candidate only at most 1 - MARGIN of the default's time (default: 0.05)")
    p.add_argument("--show", action="store_true", help="print the sizes cached for this machine and stop")
    p.add_argument("--no-save", action="store_true", help="measure and print, but leave the cache as it is")
    p.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    import torch

    from attnlab.kernels import tuned

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.show:
        where = tuned.cache_path()
        sizes = tuned.current()
        from attnlab.measure.tune import in_words

        print(f"{tuned.key()}: {in_words(sizes)}; " + (f"cache {where}" if where else "ATTNLAB_TILES=off"))
        return 0
    if args.rounds < 1:
        raise UsageError(f"--rounds {args.rounds}: give at least 1 round")
    if not 0 <= args.margin < 1:
        raise UsageError(f"--margin {args.margin}: give a fraction from 0 up to (not including) 1")
    if not args.no_save and tuned.cache_path() is None:
        raise UsageError("ATTNLAB_TILES=off leaves nowhere to save the sizes: unset it, or pass --no-save")
    if not args.no_save and (why := tuned.unwritable(tuned.cache_path())):
        raise UsageError(f"cannot write the tile cache {tuned.cache_path()}: {why}; name another file with "
                         "ATTNLAB_TILES, or pass --no-save")
    json_folder(args.json)
    from attnlab.measure import tune

    result = tune.measure(rounds=args.rounds, margin=args.margin, save=not args.no_save,
                          say=lambda line: print(line, flush=True))
    for line in tune.describe(result):
        print(line)
    print(f"{result.seconds:.0f} s, load average {_load(result.load_average_before)} before, "
          f"{_load(result.load_average_after)} after" + (f"; cached in {result.cache}" if result.cache else
                                                         "; not saved (--no-save)"))
    save_json(result, args.json)
    return 0


def _load(x) -> str:
    return "unknown" if x is None else f"{x:.1f}"
