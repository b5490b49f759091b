"""Writing a file so that a failure loses nothing: every file attnlab writes goes through here.

A result, a figure, a CSV table, the lesson page and a training checkpoint are each written to
``NAME.tmp`` beside their place and then renamed over it, so that a reader never sees half a file
and a write that fails (a full disk, a folder that went read-only, a name that is taken by a
folder) leaves the file that was there as it was. The failure is a :class:`CannotWrite` that says
which file and why, in one line; the command line prints it as its error (exit code 2). The files
written before it are complete: each was renamed into place only once it was whole.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class CannotWrite(OSError):
    """A file could not be written; the message names it, the reason, and what was kept."""

    def __init__(self, path: Path, reason: str, existed: bool):
        kept = f"{path.name} keeps what it held" if existed else f"{path.name} was not created"
        super().__init__(f"cannot write {path}: {reason}; {kept}, and the files written before it are complete")
        self.path, self.reason = path, reason


def reason(e: BaseException) -> str:
    """Why a write failed, in a few words: the system's reason (``No space left on device``) where there is one."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:160] if text else type(e).__name__


def write_file(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` by ``write(f)`` into a binary file ``NAME.tmp``, then rename it into place.

    Any failure -- making the folder, writing, flushing, renaming -- removes the temporary file and
    raises :class:`CannotWrite`; ``path`` keeps what it held.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:  # an open file: torch.save's own writer would hide ENOSPC in a RuntimeError
            write(f)
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        raise CannotWrite(path, reason(e), existed) from None
    except BaseException:  # a bug in ``write`` or Ctrl-C: no half file left behind either
        _remove(tmp)
        raise
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` as :func:`write_file` does."""
    data = text.encode("utf-8")
    return write_file(path, lambda f: f.write(data))


def _remove(tmp: Path) -> None:
    try:
        if tmp.is_symlink() or tmp.is_file():
            tmp.unlink()
    except OSError:
        pass
