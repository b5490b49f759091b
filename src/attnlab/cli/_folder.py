"""Arguments several commands share: the output folder (created, checked writable before any work) and the seed."""

from __future__ import annotations

import tempfile
from pathlib import Path


def output_folder(path) -> Path:
    """``path`` as a folder this process can write to, or a UsageError saying why not (one line)."""
    from . import UsageError

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):  # mkdir succeeds on an existing folder we may not write in
            pass
    except OSError as e:
        raise UsageError(f"cannot write to output folder {out}: {e.strerror or e}") from None
    return out


SEED_MAX = 2**32 - 1  # torch takes up to 2**64 - 1, but experiments derive seeds from seed + n


def seed(text: str) -> int:
    """argparse type: a seed from 0 to 2**32 - 1 (torch fails on larger ones with an overflow deep inside)."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= n <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected a seed from 0 to {SEED_MAX}, got {n}")
    return n
