"""Optional dependencies, and the one message that says how to install them.

``pip install attnlab`` brings torch alone: enough for the kernels, the modules and ``attnlab verify``.
The lab's figures, tables and corpus need matplotlib, rich and numpy, which come with the ``lab``
extra (``pip install 'attnlab[lab]'``); the Hugging Face adapter needs transformers and tokenizers,
which come with the ``hf`` extra. A module that needs one of them imports it with ``require(name)``;
where it is missing, the ImportError (:class:`MissingExtra`) names the extra and the pip command, and
the command line prints that as one line (exit code 2).
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS = {"matplotlib": "lab", "numpy": "lab", "rich": "lab",  # top-level module -> the extra that installs it
          "transformers": "hf", "tokenizers": "hf"}


class MissingExtra(ModuleNotFoundError):
    """An optional dependency is not installed (or does not import); the message says which extra brings it."""


def message(module: str, error: BaseException | None = None) -> str:
    """``needs rich, which comes with attnlab's 'lab' extra: pip install 'attnlab[lab]'`` for a module that is not
    there; for one that is there but fails to import, ``error`` says why, then the same pip command."""
    top = module.split(".")[0]
    extra = EXTRAS[top]
    pip = f"pip install 'attnlab[{extra}]'"
    if error is None or (isinstance(error, ModuleNotFoundError) and error.name is not None):
        return f"needs {top}, which comes with attnlab's '{extra}' extra: {pip}"
    return f"{top} is not installed ({error}); install it with {pip}"


def missing(error: BaseException) -> str | None:
    """The install message when ``error`` is a missing optional dependency, else None."""
    if isinstance(error, MissingExtra):
        return str(error)
    name = getattr(error, "name", None) or ""
    return message(name, error) if isinstance(error, ImportError) and name.split(".")[0] in EXTRAS else None


def require(module: str) -> ModuleType:
    """Import ``module`` (e.g. ``"rich.table"``); raise MissingExtra naming the extra when it is not installed."""
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if top not in EXTRAS or (e.name is not None and e.name.split(".")[0] != top):
            raise  # not the optional module itself: a fault of its own, shown as it is
        raise MissingExtra(message(module, e), name=e.name or top) from None
