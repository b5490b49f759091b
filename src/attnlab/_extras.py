"""Optional dependencies, and the one message that says how to install them.

``pip install attnlab`` brings torch alone: enough for the kernels, the modules and ``attnlab verify``.
The lab's figures, tables and corpus need matplotlib, rich and numpy, which come with the ``lab``
extra (``pip install 'attnlab[lab]'``). A module that needs one of them imports it with
``require(name)``; where it is missing, the ImportError names the extra and the pip command, and the
command line prints that as one line (exit code 2).
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS = {"matplotlib": "lab", "numpy": "lab", "rich": "lab"}  # top-level module -> the extra that installs it


class MissingExtra(ModuleNotFoundError):
    """An optional dependency is not installed; the message says which extra brings it."""


def message(module: str) -> str:
    """``needs rich, which comes with attnlab's 'lab' extra: pip install 'attnlab[lab]'``."""
    top = module.split(".")[0]
    extra = EXTRAS[top]
    return f"needs {top}, which comes with attnlab's '{extra}' extra: pip install 'attnlab[{extra}]'"


def missing(error: BaseException) -> str | None:
    """The install message when ``error`` is a missing optional dependency, else None."""
    name = getattr(error, "name", None) or ""
    return message(name) if isinstance(error, ImportError) and name.split(".")[0] in EXTRAS else None


def require(module: str) -> ModuleType:
    """Import ``module`` (e.g. ``"rich.table"``); raise MissingExtra naming the extra when it is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        text = missing(e)
        if text is None:
            raise
        raise MissingExtra(text, name=e.name) from None
