"""The flash form's autograd Functions: the forward (tiles or bands) and the backward, each under torch.func too.

``Flash`` runs the forward and hands autograd the output with each row's shift and normaliser
(m, l), which the backward rebuilds the weights from. Its backward is a Function of its own,
``FlashBackward``, so that the backward pass can itself be vmapped (gradcheck's batched-gradient
check, ``torch.func.jacrev``): both use :func:`attnlab.kernels.vmap_loop.loop` as their vmap rule.
The backward is not differentiable again (no double backward): use the matrix form for that.
"""

from __future__ import annotations

import torch

from . import flash_band, vmap_loop
from .flash import SAFE_LOGIT, Weights, backward_tiles, forward_tiles


class Flash(torch.autograd.Function):
    """(q5, k, v, bias, tiles, scale, drop, mod, *mod_params) -> (out, m, l); only out is differentiable."""

    @staticmethod
    def forward(q5, k, v, bias, tiles, scale, drop, mod=None, *mod_params):
        if tiles.band is not None and not drop.active and mod is None:
            out, _, (m, l) = flash_band.forward(q5, k, v, scale, tiles.band, SAFE_LOGIT)
        else:
            out, _, (m, l) = forward_tiles(q5, k, v, scale, tiles, drop, mod, keep_norm=True)
        return out, m, l

    @staticmethod
    def setup_context(ctx, inputs, output):
        q5, k, v, bias, tiles, scale, drop, mod, *mod_params = inputs
        _, m, l = output
        ctx.mark_non_differentiable(m, l)
        ctx.save_for_backward(q5, k, v, bias, m, l)
        ctx.cfg = (tiles, scale, drop, mod)
        ctx.mod_params = tuple(mod_params)  # the modifier reads these itself; kept here for the chain rule

    @staticmethod
    def backward(ctx, dout, _dm, _dl):
        q5, k, v, bias, m, l = ctx.saved_tensors
        wants = (bias is not None and ctx.needs_input_grad[3],
                 *(ctx.needs_input_grad[8 + i] for i in range(len(ctx.mod_params))))
        rest = (q5, k, v, bias, m, l, ctx.cfg, wants, *ctx.mod_params)
        grads = vmap_loop.legacy(FlashBackward, dout, *rest) or FlashBackward.apply(dout, *rest)
        return (*grads[:4], None, None, None, None, *grads[4:])

    @staticmethod
    def vmap(info, in_dims, *args):
        _no_batched_mod_params(in_dims[8:])
        return vmap_loop.loop(Flash, info, in_dims, *args)


class FlashBackward(torch.autograd.Function):
    """(dout, q5, k, v, bias, m, l, cfg, wants, *mod_params) -> (dq5, dk, dv, dbias or None, *dparams)."""

    @staticmethod
    def forward(dout, q5, k, v, bias, m, l, cfg, wants, *mod_params):
        tiles, scale, drop, mod = cfg
        want = [t if w else None for t, w in zip(mod_params, wants[1:], strict=True)]
        grads = backward_tiles(q5, k, v, dout.contiguous(), scale, tiles, Weights.from_norm(m, l), drop, mod,
                               bias_shape=bias.shape if wants[0] else None, mod_params=want)
        return (*grads[:4], *(grads[4] if mod is not None else ()))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("the flash form's backward pass is not differentiable (no double backward, "
                           "e.g. create_graph=True then a second grad); the matrix form's is")

    @staticmethod
    def vmap(info, in_dims, *args):
        _no_batched_mod_params(in_dims[9:])
        return vmap_loop.loop(FlashBackward, info, in_dims, *args)


def _no_batched_mod_params(dims) -> None:
    if any(d is not None for d in dims):
        raise RuntimeError("vmap over the tensors a score modifier holds is not supported: the modifier reads its "
                           "own copies; vmap over q, k, v (and a float mask) instead")
