"""attnlab: scaled dot-product attention, from the formula to a tiled kernel.

    import attnlab
    out = attnlab.attention(q, k, v, is_causal=True, impl="matrix")   # PyTorch's SDPA signature

Forms: ``attnlab.forms()``. Masks as functions: ``attnlab.masks``. Score modifiers
(soft-capping, ALiBi, a learned relative bias): ``attnlab.mods``, passed as ``score_mod=``.
A function that does not take an argument says so by raising ``attnlab.Unsupported``: ``attnlab verify``
and ``attnlab.testing`` then skip that case with the message, where any other exception is an error.
"""

import warnings

from ._starting import guard as _guard

_guard()  # the command line: a Ctrl-C while torch loads is "stopped" too, not a traceback (cli.main takes it back)

with warnings.catch_warnings():  # torch warns on import when numpy is missing; only the 'lab' extra needs numpy
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    from . import masks, mods
    from .kernels import Form, Unsupported, attention, forms, register

__version__ = "0.1.0"

__all__ = ["Form", "Unsupported", "attention", "forms", "masks", "mods", "register", "__version__"]
