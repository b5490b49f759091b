"""Loading other people's code once, from its source, in the process that will run it.

Two ways to name a function: ``package.module:function`` (``verify --impl``, imported as ``python -m``
would, the current directory first on the path) and ``FILE[:FUNCTION]`` (``lab check``, loaded from
its path). Either way the user's own files are compiled from their source every time: Python's
bytecode cache checks a file by its whole-second mtime and its size, so an edit of the same length
saved within the same second (``j < i`` -> ``j > i``) would otherwise run the old code. Nothing is
written next to the user's files either. Whatever goes wrong -- no file, a syntax error, an
exception (or ``sys.exit``, or Ctrl-C) at import, no such function -- is one :class:`LoadError` line.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path

from attnlab.judge.apart.remote import told, user_frame

LOADING: list[str] = []  # the functions this process is loading to be judged (their modules are being imported)


class LoadError(ValueError):
    """What was named cannot be loaded as a function; the message says why, in one line."""


class _FromSource(importlib.machinery.SourceFileLoader):
    """A source file's loader that never reads or writes a bytecode cache."""

    def get_code(self, fullname):
        return self.source_to_code(self.get_data(self.path), self.path)


class _UsersFirst:
    """A finder for the user's own modules (files under ``roots``) that loads them from source (see above)."""

    def __init__(self, roots: list[Path]):
        self.roots = [str(r.resolve()) for r in roots]

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        origin = getattr(spec, "origin", None)
        if spec is None or not origin or not origin.endswith(".py"):
            return None
        resolved = str(Path(origin).resolve())
        if not any(resolved.startswith(r + os.sep) for r in self.roots) or "site-packages" in resolved:
            return None
        spec.loader = _FromSource(name, origin)
        return spec


def from_source(roots: list[Path]) -> None:
    """From now on in this process: write no bytecode, and load modules under ``roots`` from their source."""
    sys.dont_write_bytecode = True
    sys.meta_path.insert(0, _UsersFirst(roots))


def _raised(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return f"called sys.exit({e.code!r})"
    return "raised " + told(e)


def import_function(spec: str) -> Callable:
    """The function ``package.module:function`` names, imported as ``python -m`` would."""
    mod_name, _, attr = spec.partition(":")
    mod_name, attr = mod_name.strip(), attr.strip()
    if not mod_name or not attr:
        raise LoadError(f"--impl {spec!r} must look like package.module:function")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    from_source([Path.cwd()])
    try:
        mod = importlib.import_module(mod_name)
    except SyntaxError as e:
        raise LoadError(f"cannot import module {mod_name!r} for --impl {spec!r}: {Path(e.filename or '?').name}, "
                        f"line {e.lineno}: syntax error: {e.msg}") from None
    except SystemExit as e:
        raise LoadError(f"module {mod_name!r} called sys.exit({e.code!r}) when imported for --impl {spec!r}") from None
    except BaseException as e:  # the module may raise anything, KeyboardInterrupt included
        raise LoadError(f"cannot import module {mod_name!r} for --impl {spec!r}: importing it {_raised(e)}") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LoadError(f"module {mod_name!r} has no attribute {attr!r} (from --impl {spec!r})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise LoadError(f"--impl {spec!r} names a {type(obj).__name__}, not a function")
    return obj


def load_file(path: Path, name: str, module_name: str = "attnlab_lab_learner") -> Callable:
    """Function ``name`` of the file at ``path``, loaded from its source (its folder first on the path)."""
    if not path.is_file():
        raise LoadError(f"{path}: no such file" + (" (it is a folder)" if path.is_dir() else ""))
    try:
        path.read_bytes()
    except OSError as e:
        raise LoadError(f"{path}: cannot read it ({e.strerror or e})") from None
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    from_source([path.resolve().parent])
    spec = importlib.util.spec_from_file_location(module_name, path, loader=_FromSource(module_name, str(path)))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look a module up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise LoadError(f"{path}, line {e.lineno}: syntax error: {e.msg}") from None
    except BaseException as e:  # the learner's module raised (or exited) while it was imported
        frame = user_frame(e.__traceback__, (str(path),))
        where = f", line {frame.lineno}" if frame is not None else ""
        raise LoadError(f"{path}{where}: importing it {_raised(e)}") from None
    fn = getattr(module, name, None)
    if fn is None:
        found = [n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module_name]
        raise LoadError(f"{path} has no function {name!r}" + (f"; it has {', '.join(found)}" if found else "")
                        + f" (pick one with {path}:NAME)")
    if not callable(fn):
        raise LoadError(f"{path}:{name} is a {type(fn).__name__}, not a function")
    return fn
