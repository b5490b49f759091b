"""Score modifiers: change each score before the mask and the softmax, in FlexAttention's convention.

A mask says *whether* query i may look at key j. A score modifier says *how much more or less* it
wants to: it takes the scaled score ``s = q_i . k_j * scale`` and returns a new one,

    score_mod(score, b, h, q_idx, kv_idx) -> score

where ``b``, ``h``, ``q_idx``, ``kv_idx`` are index tensors that broadcast against ``score`` (batch,
head, query position, key position). Real models use three, one class and one file each:

* :func:`softcap` (:class:`SoftCap`) -- ``cap * tanh(s / cap)`` keeps every logit inside (-cap, cap) (Gemma 2);
* :func:`alibi` (:class:`ALiBi`) -- adds ``slope_h * (j - i)``: a penalty that grows with distance, one slope
  per head, instead of position embeddings (Press et al., "Train Short, Test Long", 2021);
* :func:`relative_bias` (:class:`T5Bias`) -- adds a learned number per head and *bucket* of the distance j - i
  (exact for near keys, logarithmic for far ones), as T5 does (Raffel et al., 2019).

:meth:`Mod.from_fn` wraps any FlexAttention-style function, :func:`compose` chains modifiers. A
modifier that holds tensors (a bias table, ALiBi slopes given as a tensor) lists them in
``params``: every form passes gradients to them, and the flash form does so tile by tile (it also
finds a tensor that needs a gradient and is read without being listed: :func:`unlisted`).

The three built-ins are :class:`Fused` modifiers: each says in closed form whether it bounds the scores, its fused
form on a tile, and its gradient, so that the flash form fuses it into its tile instead of calling the function on
every tile (:mod:`attnlab.kernels.mods.fused`). The function stays the definition: every other form calls it, and
tests hold the two together. A new fused modifier is one more such class and its test.
"""

from .alibi import ALiBi, alibi, alibi_slopes
from .fused import Additive, Fused, distance
from .mod import Mod, ModFn, apply_dense, as_mod, compose, indices, unlisted
from .softcap import SoftCap, softcap
from .t5 import T5Bias, relative_bias, t5_bucket

__all__ = ["ALiBi", "Additive", "Fused", "Mod", "ModFn", "SoftCap", "T5Bias", "alibi", "alibi_slopes", "apply_dense",
           "as_mod", "compose", "distance", "indices", "relative_bias", "softcap", "t5_bucket", "unlisted"]
