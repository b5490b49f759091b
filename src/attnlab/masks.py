"""Mask functions for ``attn_mask=`` (re-exported from :mod:`attnlab.kernels.masks`)."""

from .kernels.masks import (
    EMPTY,
    FULL,
    PARTIAL,
    SPECS,
    BlockMap,
    Mask,
    and_masks,
    causal,
    causal_lower_right,
    document,
    from_spec,
    or_masks,
    prefix_lm,
    sliding_window,
)

__all__ = [
    "EMPTY", "FULL", "PARTIAL", "SPECS", "BlockMap", "Mask", "and_masks", "causal", "causal_lower_right",
    "document", "from_spec", "or_masks", "prefix_lm", "sliding_window",
]
