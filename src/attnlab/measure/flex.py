"""PyTorch's FlexAttention, compiled: a competitor for the benchmark, not an attnlab form.

``torch.nn.attention.flex_attention`` takes a mask as a function of the indices, just as
:mod:`attnlab.masks` does, compiles it with ``torch.compile`` into a tiled kernel, and skips the
tiles the mask hides. On the CPU that needs a C++ compiler; compiling takes seconds per new shape,
and the benchmark does it during the warm-up, so the compile time is never counted.

It is wrapped here with SDPA's signature so the benchmark can call it like every form. Only what
FlexAttention can do is accepted: no dropout, and masks given as attnlab mask functions (or
``is_causal=True``), not as tensors. PyTorch has no backward for it on the CPU; the benchmark
reports that case as skipped.
"""

from __future__ import annotations

import shutil
import weakref
from functools import lru_cache

import torch

from attnlab.kernels import masks as M
from attnlab.kernels import mods

NAME = "flex"
SUMMARY = "PyTorch's flex_attention, compiled by torch.compile"

_CAUSAL = M.causal()
_BLOCK_MASKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # mask -> {sizes: BlockMask}


@lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why flex cannot run here, or None when it can be imported (compiling is tried on first use)."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except Exception as e:  # an old PyTorch, or a build without it
        return f"cannot import torch.nn.attention.flex_attention ({type(e).__name__}: {e})"
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang", "c++", "g++")):
        return "torch.compile needs a C/C++ compiler on the CPU and none was found"
    return None


# kernels one process may compile (a shape, a mask and a modifier each): dynamo's default of 8 is passed by a bench
# of three modifiers under two masks at two lengths, and past it flex falls back to its eager path, 20x slower
RECOMPILES = 64


@lru_cache(maxsize=1)
def _compiled():
    from torch._dynamo import config
    from torch.nn.attention.flex_attention import flex_attention

    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), RECOMPILES))
    return torch.compile(flex_attention, dynamic=False)  # one kernel per shape, as fast as it gets


def _block_mask(mask: M.Mask, N: int, H: int, L: int, S: int, device):
    from torch.nn.attention.flex_attention import create_block_mask

    built = _BLOCK_MASKS.setdefault(mask, {})
    key = (N, H, L, S, str(device))
    if key not in built:  # once per mask and sizes, like the flash form's block map

        def mask_mod(b, h, q_idx, kv_idx):
            return mask(b, h, q_idx, kv_idx, L, S)

        built[key] = create_block_mask(mask_mod, N, H, L, S, device=str(device))
    return built[key]


def block_size(mask: M.Mask, N: int, H: int, L: int, S: int, device="cpu") -> tuple:
    """The (query, key) block size of the block mask flex uses for this mask and these sizes."""
    return tuple(int(x) for x in _block_mask(mask, N, H, L, S, device).BLOCK_SIZE)


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, score_mod=None):
    """FlexAttention with SDPA's arguments; q, k, v of shape (N, H, L, E) / (N, Hkv, S, E).

    ``score_mod``: an :class:`attnlab.mods.Mod` (or a plain function): FlexAttention compiles the same
    function into its kernel.
    """
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    if dropout_p:
        raise ValueError("flex has no dropout; pass dropout_p=0")
    if query.dim() != 4:
        raise ValueError(f"flex takes 4-d inputs (N, H, L, E); query has shape {tuple(query.shape)}")
    if attn_mask is not None and not isinstance(attn_mask, M.Mask):
        raise ValueError("flex takes its mask as an attnlab mask function (attnlab.masks), not a tensor")
    if attn_mask is not None and is_causal:
        raise ValueError("pass either attn_mask or is_causal=True, not both")
    N, H, L, _ = query.shape
    S = key.shape[-2]
    mask = _CAUSAL if is_causal else attn_mask
    block_mask = None
    if mask is not None:
        mask.check_sizes(N=N, H=H, L=L, S=S)
        block_mask = _block_mask(mask, N, H, L, S, query.device)
    fn = score_mod.fn if isinstance(score_mod, mods.Mod) else score_mod
    return _compiled()(query, key, value, score_mod=fn, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa)
