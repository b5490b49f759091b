"""The learner's file: written once by ``attnlab lab start``, loaded by ``attnlab lab check``.

:func:`start` copies the starter (:mod:`.starter`) into a folder as ``attention_lab.py`` -- whole or
not at all, and never over a file already there, the learner's own work. :func:`load`
imports ``FILE[:FUNCTION]`` from its path (not from ``sys.path``), and turns whatever goes wrong --
no file, a syntax error, an exception at import, no such function -- into one :class:`LoadError`
line that names the file and the line. :func:`given` tells the starter's own finished functions (the
matrix version) from the learner's: a check of those shows the check works, not that the learner did.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import textwrap
import traceback
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from attnlab.lab.results import Result

STARTER_NAME = "attention_lab.py"
DEFAULT_FUNCTION = "attention_by_hand"


class LoadError(ValueError):
    """The learner's FILE[:FUNCTION] names nothing that can be checked; the message says why, in one line."""


@dataclass
class Started(Result):
    path: str
    written: bool  # False: a file was already there, and was left as it is


def starter_text() -> str:
    return resources.files("attnlab.lab.exercise").joinpath("starter.py").read_text(encoding="utf-8")


def start(folder: str | Path) -> Started:
    """Write the starter into ``folder`` (made if needed) as attention_lab.py, unless a file of that name is there.

    Written whole or not at all (:func:`attnlab.lab.files.write_text`): a full disk leaves no file. An empty
    attention_lab.py holds no one's work (an earlier version left one on a full disk), so it is written over."""
    from attnlab.lab.files import write_text

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise LoadError(f"{folder} is a file, not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / STARTER_NAME
    empty = path.is_file() and not path.is_symlink() and path.stat().st_size == 0
    try:  # never over a file that is there, even one that appeared a moment ago
        write_text(path, starter_text(), over=empty)
    except FileExistsError:
        return Started(str(path), False)
    return Started(str(path), True)


def split(spec: str) -> tuple[Path, str]:
    """``FILE[:FUNCTION]`` -> (path, function); the function defaults to attention_by_hand."""
    file, sep, fn = spec.rpartition(":")
    if not sep or not fn.isidentifier() or not file:  # no ":", or a ":" that is part of the path
        return Path(spec), DEFAULT_FUNCTION
    return Path(file), fn


def load(spec: str):
    """(path, function name, the function) for ``FILE[:FUNCTION]``; LoadError in one line when it cannot be had."""
    path, name = split(spec)
    if not path.is_file():
        raise LoadError(f"{path}: no such file" + (" (it is a folder)" if path.is_dir() else "") +
                        "; `attnlab lab start` writes attention_lab.py")
    mod_name = f"attnlab_lab_{abs(hash(str(path.resolve())))}"
    spec_ = importlib.util.spec_from_file_location(mod_name, path)
    if spec_ is None or spec_.loader is None:
        raise LoadError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec_)
    sys.modules[mod_name] = module  # dataclasses and pickling look a module up by name
    try:
        spec_.loader.exec_module(module)
    except SyntaxError as e:
        raise LoadError(f"{path}, line {e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # the learner's module raised while it was imported
        line = next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__))
                     if Path(f.filename).resolve() == path.resolve()), None)
        where = f", line {line}" if line else ""
        raise LoadError(f"{path}{where}: importing it raised {type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if fn is None:
        found = [n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == mod_name]
        raise LoadError(f"{path} has no function {name!r}" + (f"; it has {', '.join(found)}" if found else "")
                        + f" (pick one with {path}:NAME)")
    if not callable(fn):
        raise LoadError(f"{path}:{name} is a {type(fn).__name__}, not a function")
    return path, name, fn


def _tree(source: str, name: str) -> str | None:
    """The syntax tree of function ``name`` in ``source``, comments and layout left out; None if it is not there."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)
    return ast.dump(fn) if fn is not None else None


def given(fn) -> bool:
    """Is ``fn`` one of the starter's functions as the starter has it (its comments aside), not the learner's own?"""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):  # no source to read: not the starter's text
        return False
    name = getattr(fn, "__name__", "")
    mine = _tree(source, name)
    return mine is not None and mine == _tree(starter_text(), name)
