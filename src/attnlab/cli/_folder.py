"""Where commands write: the ``--out`` folder (created and checked writable before any work) and the
``--json PATH`` file (its folder made before the run, the result written after it)."""

from __future__ import annotations

import tempfile
from pathlib import Path

OUT = "attnlab-out"  # every command writes here by default, and the lesson page reads the others' results here


def add_out(p, help: str = "output folder") -> None:
    """The ``--out`` flag every command that writes files shares."""
    p.add_argument("--out", default=OUT, help=f"{help} (default: ./{OUT})")


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


def json_folder(path: str | None) -> None:
    """Make the folder of ``--json PATH`` (if given) now, before the run; one that cannot be made is a usage
    error."""
    from . import UsageError

    if path:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def save_json(result, path: str | None, indent: str = "") -> None:
    """Write ``result`` to ``--json PATH`` (if given) and say so; a write that fails is
    :class:`attnlab.lab.files.CannotWrite`, one line from the command."""
    from attnlab.lab.results import write_json
    from attnlab.report.terminal import console

    if path:
        write_json(result, Path(path))
        console.print(f"{indent}wrote {path}")
