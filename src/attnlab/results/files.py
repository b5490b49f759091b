"""Writing a file so that a failure loses nothing: every file attnlab writes goes through here.

A result, a figure, a CSV table, the lesson page and a training checkpoint are each written to
``NAME.tmp`` beside their place and then renamed over it, so that a reader never sees half a file
and a write that fails (a full disk, a folder that went read-only, a name that is taken by a
folder) leaves the file that was there as it was. The failure is a :class:`CannotWrite` that says
which file and why, in one line; the command line prints it as its error (exit code 2). The files
written before it are complete: each was renamed into place only once it was whole. A device or a
pipe (``--json /dev/stdout``) is written straight into: renamed over, the device itself would be replaced.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class CannotWrite(OSError):
    """A file could not be written; the message names it, the reason, and what was kept."""

    def __init__(self, path: Path, reason: str, existed: bool | None):
        kept = f"{path.name} keeps what it held" if existed else f"{path.name} was not created"
        if existed is None:  # a device or a pipe: nothing kept or made
            super().__init__(f"cannot write {path}: {reason}; the files written before it are complete")
        else:
            super().__init__(f"cannot write {path}: {reason}; {kept}, and the files written before it are complete")
        self.path, self.reason = path, reason


def reason(e: BaseException) -> str:
    """Why a write failed, in a few words: the system's reason (``No space left on device``) where there is one."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:160] if text else type(e).__name__


def write_file(path: str | Path, write: Callable[[BinaryIO], object], *, over: bool = True) -> Path:
    """Write ``path`` by ``write(f)`` into a binary file ``NAME.tmp``, then rename it into place.

    Any failure -- making the folder, writing, flushing, renaming -- removes the temporary file and
    raises :class:`CannotWrite`; ``path`` keeps what it held. ``over=False``: never over a file that is
    there, even one that appeared while ``NAME.tmp`` was written (``FileExistsError``, nothing changed).
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    existed = path.exists()
    if existed and not path.is_file() and not path.is_dir():  # a device or a pipe (/dev/stdout): written straight
        try:  # into, since renaming over it would replace the device itself
            with open(path, "wb") as f:
                write(f)
        except OSError as e:
            raise CannotWrite(path, reason(e), None) from None
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:  # an open file: torch.save's own writer would hide ENOSPC in a RuntimeError
            write(f)
        if over:
            os.replace(tmp, path)
        else:
            _link(tmp, path)
    except FileExistsError:
        _remove(tmp)
        raise
    except OSError as e:
        _remove(tmp)
        raise CannotWrite(path, reason(e), existed) from None
    except BaseException:  # a bug in ``write`` or Ctrl-C: no half file left behind either
        _remove(tmp)
        raise
    return path


def write_text(path: str | Path, text: str, *, over: bool = True) -> Path:
    """Write ``text`` (UTF-8) to ``path`` as :func:`write_file` does."""
    data = text.encode("utf-8")
    return write_file(path, lambda f: f.write(data), over=over)


def _link(tmp: Path, path: Path) -> None:
    """Put the whole ``tmp`` at ``path`` unless a file is there (a hard link is made or refused in one step)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: look, then rename
        if path.exists():
            raise FileExistsError(path) from None
        os.replace(tmp, path)
        return
    tmp.unlink()


def _remove(tmp: Path) -> None:
    try:
        if tmp.is_symlink() or tmp.is_file():
            tmp.unlink()
    except OSError:
        pass
