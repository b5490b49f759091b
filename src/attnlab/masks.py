"""Mask functions for ``attn_mask=`` (re-exported from :mod:`attnlab.kernels.masks`)."""

from .kernels.masks import (
    EMPTY,
    FULL,
    PARTIAL,
    BlockMap,
    Mask,
    and_masks,
    causal,
    causal_lower_right,
    document,
    or_masks,
    prefix_lm,
    sliding_window,
)

__all__ = [
    "EMPTY", "FULL", "PARTIAL", "BlockMap", "Mask", "and_masks", "causal", "causal_lower_right",
    "document", "or_masks", "prefix_lm", "sliding_window",
]
