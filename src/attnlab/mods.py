"""Score modifiers for ``score_mod=`` (re-exported from :mod:`attnlab.kernels.mods`)."""

from .kernels.mods import Mod, alibi, alibi_slopes, compose, relative_bias, softcap, t5_bucket

__all__ = ["Mod", "alibi", "alibi_slopes", "compose", "relative_bias", "softcap", "t5_bucket"]
