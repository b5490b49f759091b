"""attnlab: scaled dot-product attention, from the formula to a tiled kernel.

    import attnlab
    out = attnlab.attention(q, k, v, is_causal=True, impl="matrix")   # PyTorch's SDPA signature

Forms: ``attnlab.forms()``. Masks as functions: ``attnlab.masks``.
"""

from . import masks
from .kernels import Form, attention, forms, register

__version__ = "0.1.0"

__all__ = ["Form", "attention", "forms", "masks", "register", "__version__"]
