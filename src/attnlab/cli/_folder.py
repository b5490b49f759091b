"""Where commands write: the ``--out`` folder (created and checked writable before any work), the ``--json PATH``
file (its folder made before the run, the result written after it), and the check that a run does not replace the
results of a run with other settings there without a word (``--force`` replaces them)."""

from __future__ import annotations

import tempfile
from pathlib import Path

OUT = "attnlab-out"  # every command writes here by default, and the lesson page reads the others' results here


def add_out(p, help: str = "output folder") -> None:
    """The ``--out`` flag every command that writes files shares."""
    p.add_argument("--out", default=OUT, help=f"{help} (default: ./{OUT})")


def output_folder(path, flag: str = "--out") -> Path:
    """``path`` as a folder this process can write to, or a UsageError saying why not (one line; ``flag``: the
    option that named it)."""
    from . import UsageError

    if not str(path).strip():  # Path("") is the current folder: an empty name must not quietly mean "here"
        leave = f", or leave --out out for ./{OUT}" if flag == "--out" else ""
        raise UsageError(f"{flag} {str(path)!r}: an empty folder name; give a folder{leave}")
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {out} is a file, not a folder")
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

    if path is not None:
        if not path.strip():  # an empty name would write nothing, and say nothing
            raise UsageError(f"--json {path!r}: an empty file name; give the name of a file to write, such as "
                             "result.json")
        if Path(path).is_dir():
            raise UsageError(f"--json {path} is a folder; give the name of a file to write, such as "
                             f"{Path(path) / 'result.json'}")
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def save_json(result, path: str | None, indent: str = "") -> None:
    """Write ``result`` to ``--json PATH`` (if given) and say so; a write that fails is
    :class:`attnlab.results.files.CannotWrite`, one line from the command."""
    from attnlab.report.terminal import console
    from attnlab.results import write_json

    if path is not None:
        write_json(result, Path(path))
        console.print(f"{indent}wrote {path}")


def add_force(p) -> None:
    """The ``--force`` flag of every command whose results a run with other settings would replace."""
    p.add_argument("--force", action="store_true",
                   help="replace the results of a run with other settings in the output folder (without it, such a "
                        "run is refused: use another --out to keep both)")


def keep_other_run(path: Path, now: dict, saved_of, what: str, force: bool, hint="") -> None:
    """A UsageError when the result file ``path`` holds ``what`` of a run whose settings differ from ``now``.

    One folder holds one run of each command: the lesson page, ``sample`` and ``--resume`` read it by
    fixed names, so a run with other settings must not replace it without a word. ``saved_of(data)``
    picks the saved settings out of the file's JSON; only the keys of ``now`` are compared. A file that
    cannot be read holds no run to keep. ``hint``: as :func:`refuse_other_settings` takes it.
    """
    import json

    if force or not path.is_file():
        return
    try:
        saved = saved_of(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return
    if isinstance(saved, dict):
        refuse_other_settings(path, saved, now, what, hint)


def refuse_other_settings(path: Path, saved: dict, now: dict, what: str, hint="") -> None:
    """The UsageError of :func:`keep_other_run`, for settings already read (a checkpoint's). ``hint``: a first way
    out, or a function of the saved settings giving one ("" for none)."""
    import json

    from . import UsageError

    now = json.loads(json.dumps(now))  # as the file holds them: tuples as lists, keys as strings
    diff = [f"{k}: {_short(saved.get(k))} -> {_short(v)}" for k, v in now.items() if saved.get(k) != v]
    if diff:
        hint = hint(saved) if callable(hint) else hint
        raise UsageError(f"{path} holds {what} with other settings ({'; '.join(diff)}); {hint}add --force to replace "
                         "it, or give this run its own --out DIR")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
