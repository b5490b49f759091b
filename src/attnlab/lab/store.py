"""Where ``attnlab lab check`` keeps its results: one file per check, never over an earlier one.

Every check is a file of its own in ``lab-checks/`` in the output folder, named from the learner's
file, the function and the time of the check::

    lab-checks/attention_lab-my_attention-20261201T224703.123456Z.json   (and .png beside it)

so checking the starter's ``attention_by_hand`` can never replace the result of the learner's own
``my_loops.py:attention_by_hand``, and a check that fails never replaces the one that passed before
it: both are kept, and each says when it was made. :func:`history` reads them back newest first;
:func:`latest` keeps the newest check of each file and function, which is what the learner's
function is now.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from attnlab.results import BadField, write_json
from attnlab.results.files import CannotWrite

from .result import LabResult

FOLDER = "lab-checks"  # in the output folder


def now() -> str:
    """The time of a check: ISO 8601, UTC, to the microsecond (so checks a moment apart still sort)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def when(result: LabResult) -> datetime:
    """The time ``result`` was checked, as a datetime in UTC."""
    return datetime.fromisoformat(result.time).astimezone(UTC)


def passed(result: LabResult) -> bool:
    """The check's verdict, as ``attnlab lab check``'s exit code, its Next line and the lesson page give it: every
    graded case passed, the output matches F.scaled_dot_product_attention to the lab's tolerance, and what the level
    asks of its measurement (level 2's memory like T², level 4's like T) held -- a rule measured that did not hold
    is not a pass anywhere. (``result.passed`` is the grading's alone.)"""
    return result.passed and result.match_err <= result.match_tol and result.measured_ok is not False


def save(result: LabResult, out: str | Path) -> Path:
    """Write ``result`` as the newest check in ``out`` (giving it the time of the check if it has none); returns
    the JSON's path, beside which the check's figure goes (``path.with_suffix(".png")``)."""
    if not result.time:
        result.time = now()
    folder = Path(out) / FOLDER
    if folder.is_symlink() and not folder.exists():
        raise CannotWrite(folder, "it is a symbolic link to nothing", None)
    if folder.exists() and not folder.is_dir():
        raise CannotWrite(folder, "it is a file, not the folder the checks are kept in", None)
    base = f"{Path(result.file).stem}-{result.function}-{when(result).strftime('%Y%m%dT%H%M%S.%fZ')}"
    path, n = folder / f"{base}.json", 1
    while path.exists():  # two checks within the same microsecond: the second gets a number, the first stays
        n += 1
        path = folder / f"{base}-{n}.json"
    return write_json(result, path)


def _not_a_check(path: Path, why: str) -> ValueError:
    return ValueError(f"{path}: {why}, so it is not a result of `attnlab lab check`; run the check again or remove "
                      "the file")


def _read(path: Path) -> LabResult:
    try:
        result = LabResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, AttributeError) as e:  # unreadable, not JSON, not a check's fields
        raise _not_a_check(path, str(e).strip() if isinstance(e, BadField) else f"{type(e).__name__}: {e}") from None
    if not result.time:  # written by hand or by an older attnlab: the file's own time is the best there is
        result.time = datetime.fromtimestamp(os.stat(path).st_mtime, UTC).isoformat(timespec="microseconds")
    try:
        when(result)
    except ValueError:
        raise _not_a_check(path, f"time should be an ISO 8601 time, got {result.time!r}") from None
    return result


def history(out: str | Path) -> list[LabResult]:
    """Every check kept in ``out``, newest first (each with its file, function, time and verdict); [] when there
    is none. A file that is not a check's result is a ValueError naming it."""
    paths = sorted((Path(out) / FOLDER).glob("*.json"))
    found = [(_read(p), p.name) for p in paths]
    found.sort(key=lambda x: (when(x[0]), x[1]), reverse=True)
    return [r for r, _ in found]


def key(result: LabResult) -> tuple[str, str]:
    """What a check is a check of: the file (as written, ``./a.py`` and ``a.py`` alike) and the function."""
    return os.path.normpath(result.file), result.function


def latest(results: list[LabResult]) -> list[LabResult]:
    """The newest check of each file and function in ``results`` (newest first, as :func:`history` gives them):
    what each of the learner's functions is now, an earlier verdict of the same function set aside."""
    seen, out = set(), []
    for r in results:
        if key(r) not in seen:
            seen.add(key(r))
            out.append(r)
    return out
