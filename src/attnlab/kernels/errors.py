"""The errors attention raises: clear messages, in the classes that code written for PyTorch catches.

``F.scaled_dot_product_attention`` raises ``RuntimeError`` for most bad inputs (mismatched dtypes or
shapes, a mask of the wrong dtype, a dropout probability out of range), and code written against it
catches exactly that, e.g. to fall back to another path. attnlab's checks say more -- they name the
argument and the shapes -- in a ``ValueError`` or ``TypeError``, the classes Python code expects. Each
class here is both, so either ``except`` clause catches it::

    try:
        out = attnlab.attention(q, k.half(), v.half())
    except RuntimeError:        # as with PyTorch: caught
        ...
    except TypeError:           # also true of it: a wrong dtype is a TypeError
        ...

Where PyTorch raises ``TypeError`` (an argument of the wrong kind: ``is_causal=1``, a list as the
mask) attnlab raises a plain ``TypeError`` too.
"""

from __future__ import annotations


class ArgumentError(ValueError, RuntimeError):
    """A bad value or shape of one of attention's arguments (PyTorch raises RuntimeError for it)."""


class ArgumentTypeError(TypeError, RuntimeError):
    """A wrong dtype among attention's arguments (PyTorch raises RuntimeError for it)."""


class Unsupported(ValueError):
    """An input that a form does not handle (e.g. dropout in the triton form); the message names the
    forms that do. Public as ``attnlab.Unsupported``: any attention function raises it to refuse an argument,
    and ``attnlab verify`` reports such a case as skipped, with the message, not as failed (any other
    exception, a plain ``ValueError`` or ``NotImplementedError`` included, is an error)."""
