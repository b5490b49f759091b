"""Score modifiers for ``score_mod=`` (re-exported from :mod:`attnlab.kernels.mods`)."""

from .kernels.mods import (
    Additive,
    ALiBi,
    Fused,
    Mod,
    SoftCap,
    T5Bias,
    alibi,
    alibi_slopes,
    compose,
    relative_bias,
    softcap,
    t5_bucket,
)

__all__ = ["ALiBi", "Additive", "Fused", "Mod", "SoftCap", "T5Bias", "alibi", "alibi_slopes", "compose",
           "relative_bias", "softcap", "t5_bucket"]
