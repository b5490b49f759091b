"""The output folder of a command: created if needed, and checked writable before any work starts."""

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
