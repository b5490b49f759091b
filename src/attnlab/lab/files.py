"""The learner's file: written once by ``attnlab lab start``, loaded by ``attnlab lab check``.

:func:`start` copies the starter (:mod:`.starter`) into a folder as ``attention_lab.py`` -- whole or
not at all, and never over a file already there, the learner's own work. :func:`split`
splits ``FILE[:FUNCTION]``; the file is loaded, once and from its source, in the learner's own judged
process (:mod:`.judged`, :mod:`attnlab.judge.apart.loader`), never in the judge's. :func:`given_text`
tells a starter's function as it came (its TODOs left) from the learner's, from the file's text: a
check of that shows what is left to do, not what the learner did.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from attnlab.judge import LoadError  # noqa: F401 -- the lab's load errors are the loader's
from attnlab.results import Result

STARTER_NAME = "attention_lab.py"
DEFAULT_FUNCTION = "attention_by_hand"


@dataclass
class Started(Result):
    path: str
    written: bool  # False: a file was already there, and was left as it is


def starter_text() -> str:
    return resources.files("attnlab.lab").joinpath("starter.py").read_text(encoding="utf-8")


def start(folder: str | Path, level=None) -> Started:
    """Write the starter into ``folder`` (made if needed) as attention_lab.py, unless a file of that name is there
    (``level``: a level of :mod:`.levels`, whose own starter and file name are written instead).

    Written whole or not at all (:func:`attnlab.results.files.write_text`): a full disk leaves no file. An empty
    attention_lab.py holds no one's work (an earlier version left one on a full disk), so it is written over."""
    from attnlab.results.files import write_text

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise LoadError(f"{folder} is a file, not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (STARTER_NAME if level is None else level.filename)
    text = starter_text() if level is None else level.starter_text()
    if path.is_dir() or (path.exists() and not path.is_file()):
        raise LoadError(f"{path} is {'a folder' if path.is_dir() else 'not a file'}, where the level's file goes: "
                        f"move it, or start the level in another folder")
    empty = path.is_file() and not path.is_symlink() and path.stat().st_size == 0
    try:  # never over a file that is there, even one that appeared a moment ago
        write_text(path, text, over=empty)
    except FileExistsError:
        return Started(str(path), False)
    return Started(str(path), True)


def split(spec: str, default: str | None = None) -> tuple[Path, str]:
    """``FILE[:FUNCTION]`` -> (path, function); the function defaults to ``default`` (else attention_by_hand)."""
    fn = named(spec)
    if fn is None:
        return Path(spec), default or DEFAULT_FUNCTION
    return Path(spec.rpartition(":")[0]), fn


def named(spec: str) -> str | None:
    """The FUNCTION of ``FILE:FUNCTION``; None when the spec names a file alone (a ":" may be part of a path)."""
    file, sep, fn = spec.rpartition(":")
    return fn if sep and fn.isidentifier() and file else None


def _tree(source: str, name: str) -> str | None:
    """The syntax tree of function ``name`` in ``source``, comments and layout left out; None if it is not there."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name), None)
    return ast.dump(fn) if fn is not None else None


# What attention_lab.py held before level 2 had a starter of its own: a finished attention_matrix. A file written
# then still holds it, and it is the starter's code, not the learner's (it must tick nothing on the page).
EARLIER_GIVEN = '''
def attention_matrix(q, k, v):
    """The same attention in four matrix lines: (..., L, E), (..., S, E), (..., S, Ev) -> (..., L, Ev)."""
    L, S, dtype = q.shape[-2], k.shape[-2], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    future = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return (weights @ v).to(dtype)
'''


def given_text(source: str, name: str, starter: str | None = None) -> bool:
    """Is function ``name`` of this source text one of the starter's as the starter has it (its comments aside), not
    the learner's own? Read from the file's text: the judge never imports the learner's module. ``starter``: a
    level's starter text (default: the lab's first, attention_lab.py); what an earlier starter gave counts too."""
    mine = _tree(source, name)
    return mine is not None and (mine == _tree(starter_text() if starter is None else starter, name)
                                 or mine == _tree(EARLIER_GIVEN, name))


def functions_in(source: str) -> list[str]:
    """The names of the functions the source text defines at its top level (what ``FILE:NAME`` can pick)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
