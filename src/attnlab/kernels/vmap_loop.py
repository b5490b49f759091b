"""A vmap rule for attnlab's autograd Functions: call the Function once per entry of the vmapped dim.

``torch.func`` (vmap, jacrev, and ``gradcheck(..., check_batched_grad=True)``, which vmaps the
backward pass over many output gradients) needs every ``torch.autograd.Function`` to say what it does
under vmap. PyTorch can generate that rule only for Functions built from vmappable operations; the
flash and ring loops write tiles in place, read a block map with ``.tolist()`` and branch on values,
so each of their Functions names this rule instead: slice the inputs along the vmapped dim, apply the
Function to each slice (the tile tables, dropout seed and ring schedule are the same for every slice),
and stack the results. It costs a Python loop over the vmapped dim -- a transform's price, never paid
by a plain call.
"""

from __future__ import annotations

import torch


def loop(function, info, in_dims, *args):
    """``function.apply`` on each slice of the vmapped dim of ``args``; (outputs, out_dims) for a vmap rule."""
    outs = []
    for i in range(info.batch_size):
        sliced = [a.select(d, i) if d is not None and isinstance(a, torch.Tensor) else a
                  for a, d in zip(args, in_dims, strict=True)]
        out = function.apply(*sliced)
        outs.append(out if isinstance(out, tuple) else (out,))
    stacked = tuple(None if outs[0][j] is None else torch.stack([o[j] for o in outs]) for j in range(len(outs[0])))
    dims = tuple(None if s is None else 0 for s in stacked)
    return stacked, dims


def legacy(function, grad, *rest):
    """``function.apply(grad, *rest)`` once per entry when ``grad`` is batched by the older vmap, else None.

    ``gradcheck(..., check_batched_grad=True)`` vmaps the backward pass with ``torch._vmap_internals``,
    which calls a Function's forward with batched tensors and never asks for its vmap rule. There the
    output gradient is the one batched input: it is taken apart (the batch dim to the front), the
    Function applied to each entry, and the results put back as batched tensors of the same level.
    """
    if not torch._C._functorch.is_legacy_batchedtensor(grad):
        return None
    level = torch._C._vmapmode_increment_nesting() - 1  # the level now running: one below a fresh one
    torch._C._vmapmode_decrement_nesting()
    physical = torch._remove_batch_dim(grad, level, 1, 0)  # (B, ...): a batched tensor keeps its own size
    if torch._C._functorch.is_legacy_batchedtensor(physical):
        raise RuntimeError("nested vmap over attnlab's backward pass is not supported")
    outs = [function.apply(g, *rest) for g in physical]
    per_output = zip(*outs, strict=True)
    return tuple(None if o[0] is None else torch._add_batch_dim(torch.stack(o), 0, level) for o in per_output)
