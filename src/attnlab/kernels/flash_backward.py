"""The flash form's backward: FlashAttention-2 by recomputation, one query tile at a time.

Each tile's weights are rebuilt from what the forward saved per row (:class:`Weights`: the flash
form's own shift and normaliser, or ring attention's global log-sum-exp), never stored:

    dV += P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),   dQ += dS K,   dK += dS^T Q

With a score modifier, dS is pulled back through it inside the tile (the chain rule under autograd),
to the raw scores and to any tensor the modifier holds. :class:`FlashBackward` is this pass as an
autograd Function of its own, so that it can itself be vmapped. The tags [P1] .. [P12] are the
performance notes in :mod:`attnlab.kernels.flash`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import dropout, online, vmap_loop
from .dropout import NO_DROPOUT, Dropout
from .dtypes import half_product_fits
from .flash_tiles import Keys, Tiles, buffer_view, dropout_keep, mask_scores, mask_slice, modify, rounded
from .masks import PARTIAL
from .mods import Mod
from .online import LN2, LOG2E


def delta(dout: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """[P10] D = rowsum(dO * O) (..., L) from forward's output in the working dtype, summed in float64: the term
    dS = P * (dP - D) subtracts, computed once per row instead of once per key tile."""
    return (dout.double() * out.double()).sum(dim=-1).to(out.dtype)


@dataclass(frozen=True)
class Weights:
    """How backward rebuilds each row's weights, per row (N, Hkv, G, L):

        P = exp(s - shift) / norm,   with dO and D multiplied by corr

    (s, shift and hi in base-2 units, as forward's scores: P = exp2(s - shift) / norm [P8]), and D = rowsum(dO * O).

    :meth:`from_norm` (the flash form: this block's own forward): shift = m and norm = l, so P is
    exactly what forward divided (a lone key's weight is e / e = 1, not exp(s - lse) = 1 +- ulp).
    ``whole``: the tiles hold every key of every row, so a row that sees exactly one key (its true
    gradient is 0) gets dS = 0 exactly [P10]: D from O and dP from dO V^T round differently, and
    would leave ~1e-6 there. :meth:`from_lse` (ring attention: the global float64 lse and D, one
    block of a larger problem): [P4] exp(s - lse) = exp(s - hi) * exp(hi - lse), with hi = lse in
    the working dtype and corr = exp(hi - lse) ~ 1.
    """

    shift: torch.Tensor
    D: torch.Tensor  # rowsum(dO * O): delta()
    corr: torch.Tensor | None = None
    norm: torch.Tensor | None = None
    whole: bool = False  # every key of every row is in these tiles: lone rows get dS = 0

    @classmethod
    def from_norm(cls, m: torch.Tensor, l: torch.Tensor, D: torch.Tensor) -> Weights:
        return cls(m, D, norm=l, whole=True)

    @classmethod
    def from_lse(cls, lse: torch.Tensor, D: torch.Tensor, dtype: torch.dtype) -> Weights:
        hi, corr = online.shift_of_lse(lse, dtype)  # [P4] [P8]; dead rows: P = exp2(s - inf) = 0
        return cls(hi, D, corr)

    def rows(self, rows: slice, dout: torch.Tensor):
        """One query tile's (c * dO, shift, norm or None, c * D), rows as (N, Hkv, G*r, .)."""
        N, Hkv, G = dout.shape[:3]
        R = G * (rows.stop - rows.start)

        def cut(t):
            return None if t is None else t[:, :, :, rows].reshape(N, Hkv, R, 1)

        c = cut(self.corr)
        doi = dout[:, :, :, rows].reshape(N, Hkv, R, dout.shape[-1])
        Di = cut(self.D)
        if c is not None:
            doi, Di = doi * c, Di * c
        return doi, cut(self.shift), cut(self.norm), Di


def backward_tiles(q5, k, v, dout, scale, tiles: Tiles, weights: Weights, drop: Dropout = NO_DROPOUT,
                   mod: Mod | None = None, *, bias_shape=None, mod_params=(), half: torch.dtype | None = None):
    """FlashAttention-2 backward by recomputation. Returns dq5, dk, dv and (if ``bias_shape``) dbias.

    ``weights`` says how each tile's weights are rebuilt (:class:`Weights`). With a score modifier
    ``mod``, dS is pulled back through it tile by tile, and the gradients of the tensors in
    ``mod_params`` are returned as a fifth item (a list). [P7] The outer loop is over query tiles.
    ``half``: the inputs' half dtype (q5, k, v and dout hold half values, upcast): P^T dO, dS K and
    dS^T Q are half-precision matmuls of P and dS rounded to it [P11]; the scores, dP, D and dS are
    float32, and so are the sums dq, dk, dv.
    """
    N, Hkv, G, L, E = q5.shape
    dq5, dk, dv = torch.zeros_like(q5), torch.zeros_like(k), torch.zeros_like(v)
    dk3 = dk.view(N * Hkv, *dk.shape[2:])  # (N*Hkv, S, E): the same memory, for batched matmuls
    dbias = q5.new_zeros(bias_shape) if bias_shape is not None else None
    dparams = [None] * len(mod_params)
    keys = Keys.of(k, v, tiles, drop, mod, G, scale, half, spare=False, q=q5)
    n = N * Hkv * G * min(tiles.block_q, L) * min(tiles.block_k, k.shape[2])
    capped = keys.closed is not None and keys.closed.cap is not None  # [P12] the soft-cap's slope kept per tile
    bufs = (q5.new_empty(n), q5.new_empty(n), q5.new_empty(n) if capped else None)  # [P3] scores, dP (, slope)
    hbuf = None if half is None else q5.new_empty(n, dtype=half)  # [P3] [P11] P, then dS, rounded
    for qt, rows in tiles.query_tiles():
        # -- 1. this query tile, and its rows' saved numbers --
        qi = q5[:, :, :, rows].reshape(N, Hkv, G * (rows.stop - rows.start), E)
        doi, shift, norm, Di = weights.rows(rows, dout)
        R = qi.shape[2]
        qih, doih = (qi.reshape(N * Hkv, R, E).to(half), doi.to(half)) if half is not None else (None, None)
        # [P1] the scores by the same product as forward's: P is rebuilt bit for bit (tile forward)
        walk = (qi, doi, shift, norm, keys, bufs, qt, rows)
        lone = _lone_rows(tiles, qt, rows, N, Hkv, G) if weights.whole else None  # [P10]
        # -- 2. each key tile: dV, dS, then dQ (this tile's own) and dK --
        dqi = torch.zeros_like(qi)
        for cols, P, dP, keep, through in _key_tiles(*walk):
            Pk = P if keep is None else P * keep
            if half is None:
                dv[:, :, cols] += torch.matmul(Pk.transpose(-2, -1), doi)
            else:  # [P11] P rounded to the input dtype; the half product is added into the float32 dV
                dv[:, :, cols] += torch.matmul(rounded(hbuf, Pk).transpose(-2, -1), doih)
            dS = dP.sub_(Di).mul_(P)  # dS = P * (dP - D), D from forward's output [P10]
            if lone is not None:
                dS.masked_fill_(lone, 0.0)  # [P10] one visible key: its weight is 1 whatever its score
            if dbias is not None:
                _add_bias_grad(dbias, dS.view(N, Hkv * G, -1, dS.shape[-1]), rows, cols)
            if keys.closed is not None:  # [P12] the chain rule in closed form
                dparams = _through_closed(keys, through, mod_params, dS, dparams, rows, cols)
            elif through is not None:  # chain rule through the modifier: dS to the raw scores and its tensors
                dS, dparams = _through_mod(*through, mod_params, dS, dparams)
            if half is None:
                dqi.add_(torch.matmul(dS, k[:, :, cols]))
                dk3[:, cols].baddbmm_(dS.view(N * Hkv, R, -1).transpose(1, 2), qi.reshape(N * Hkv, R, E),
                                      alpha=scale)  # [P1] dk += scale * dS^T q
            else:  # [P11] dS rounded to the input dtype once, for both half products; dk scaled at the end
                dSh = rounded(hbuf, dS)
                dqi.add_(torch.matmul(dSh, keys.kh[:, :, cols]))
                dk3[:, cols].add_(torch.bmm(dSh.view(N * Hkv, R, -1).transpose(1, 2), qih))
        dq5[:, :, :, rows] = (dqi * scale).view(N, Hkv, G, rows.stop - rows.start, E)
    if half is not None:
        dk.mul_(scale)
    if mod is not None:
        return dq5, dk, dv, dbias, dparams
    return dq5, dk, dv, dbias


def _lone_rows(tiles: Tiles, qt: int, rows: slice, N: int, Hkv: int, G: int) -> torch.Tensor | None:
    """[P10] The rows of a query tile that see exactly one key, as a bool (Nb, Hkv, G*r, 1) for dS's rows, or None."""
    lone = tiles.lone(qt, rows)  # (Nb, Hb, r), query heads h = hk * G + g
    if lone is None:
        return None
    Nb, r = lone.shape[0], rows.stop - rows.start
    return lone.expand(Nb, Hkv * G, r).reshape(Nb, Hkv, G * r, 1)


def _key_tiles(qi, doi, shift, norm, keys: Keys, bufs, qt: int, rows: slice):
    """Each computed key tile of one query tile: (cols, P, dP, keep, through), weights rebuilt, dP = c dO V^T.

    ``qi`` (N, Hkv, G*r, E) is the query tile (its scores: :meth:`Keys.product`); ``shift`` / ``norm``
    (N, Hkv, G*r, 1) rebuild P (:class:`Weights`). P and dP live in the two reused buffers ``bufs``: use
    them before the next.
    With a score modifier, ``through`` is (modified scores, raw scores) with the graph between them,
    for the chain rule; else None.
    """
    for kt, cols, kind in keys.tiles.key_tiles(qt, rows):
        # -- 1. scores, through the modifier under autograd when there is one (a built-in: fused [P12]) --
        if keys.mod is None or keys.closed is not None:
            slope = None if bufs[2] is None else buffer_view(bufs[2], (*qi.shape[:3], cols.stop - cols.start))
            s, through = keys.scores(qi, bufs[0], qt, rows, kt, cols, kind, slope=slope), slope
        else:
            raw = keys.product(qi, bufs[0], cols).mul_(LN2).detach().requires_grad_(True)  # [P8] natural units
            with torch.enable_grad():  # a modifier that works in place gets a copy: raw is a leaf of the graph
                modded = modify(keys.mod, raw.clone() if keys.tiles.mod_in_place else raw, keys.G, rows, cols)
            s, through = modded.detach() * LOG2E, (modded, raw)
            if kind == PARTIAL:
                mask_scores(s, keys.tiles.tile(qt, kt, rows, cols), keys.G)
        # -- 2. the tile's weights, recomputed from the saved shift (and normaliser) --
        P = s.sub_(shift).exp2_()  # [P8]
        if norm is not None:
            P.div_(norm)  # exp(s - m) / l, divided as forward divided: a lone key's weight is exactly 1
        # -- 3. dP = dO V^T, dropped where forward dropped --
        dP = torch.matmul(doi, keys.v[:, :, cols].transpose(-2, -1), out=buffer_view(bufs[1], P.shape))
        keep = dropout_keep(keys.drop, s, keys.G, rows, cols) if keys.drop.active else None
        if keep is not None:
            dP.mul_(keep)
        yield cols, P, dP, keep, through


def _through_closed(keys: Keys, slope, params, dS, dparams, rows: slice, cols: slice):
    """[P12] dS (N, Hkv, G*r, c) w.r.t. a built-in's modified scores, to the raw ones, in place: times the soft-cap's
    slope 1 - tanh^2; unchanged by an added bias, whose tensor's gradient (when asked for) is summed from it."""
    if slope is not None:
        dS.mul_(slope)
    elif params and params[0] is not None:
        N, Hkv, _, c = dS.shape
        g = keys.closed.grad(dS.view(N, Hkv * keys.G, -1, c), rows, cols)
        dparams[0] = g if dparams[0] is None else dparams[0] + g
    return dparams


def _through_mod(modded, raw, params, dS, dparams):
    """Backpropagate dS (w.r.t. the modified scores) through the modifier: d raw scores, and add to d params."""
    want = [t for t in params if t is not None]
    grads = torch.autograd.grad(modded, [raw, *want], dS, allow_unused=True)
    it = iter(grads[1:])
    for i, t in enumerate(params):
        if t is None:
            continue
        g = next(it)
        if g is not None:
            dparams[i] = g if dparams[i] is None else dparams[i] + g
    return grads[0], dparams


def _add_bias_grad(dbias: torch.Tensor, dS: torch.Tensor, rows: slice, cols: slice) -> None:
    """Add a tile's dS (N, H, r, c) to the gradient of a float mask, summed over its broadcast dims."""
    dims = [d for d in range(4) if dbias.shape[d] == 1 and dS.shape[d] != 1]
    g = dS.sum(dim=dims, keepdim=True) if dims else dS
    mask_slice(dbias, rows, cols).add_(g)


class FlashBackward(torch.autograd.Function):
    """(dout, q5, k, v, bias, m, l, out, cfg, wants, *mod_params) -> (dq5, dk, dv, dbias or None, *dparams).

    ``out`` is forward's own output in the working dtype (before any rounding to a half input dtype): D = rowsum(dO * O)
    is taken from it [P10]."""

    @staticmethod
    def forward(dout, q5, k, v, bias, m, l, out, cfg, wants, *mod_params):
        tiles, scale, drop, mod, half = cfg
        want = [t if w else None for t, w in zip(mod_params, wants[1:], strict=True)]
        dout = dout.contiguous()
        half = _backward_half(half, q5, k, v, dout, tiles, drop, mod)
        grads = backward_tiles(q5, k, v, dout, scale, tiles, Weights.from_norm(m, l, delta(dout, out)), drop, mod,
                               bias_shape=bias.shape if wants[0] else None, mod_params=want, half=half)
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
        no_batched_mod_params(in_dims[10:])
        return vmap_loop.loop(FlashBackward, info, in_dims, *args)


def _backward_half(half, q5, k, v, dout, tiles: Tiles, drop: Dropout, mod) -> torch.dtype | None:
    """[P11] The backward's matmul dtype: ``half``, unless it is float16 and a product could pass 65504.

    With P <= 1 and the keep-mask at most f = 1/(1-p): |dP_ij| <= f |dO_i| |v_j| and |D_i| <= |dO_i| |O_i|
    <= f |dO_i| max|v|, so |dS_ij| <= P_ij * 2 f |dO| |v| (norms over the head dim) and a row's dS sums
    to at most that bound. Hence |P^T dO| <= R f max|dO|, |dS K| <= bound * max|k| and
    |dS^T Q| <= R bound max|q| over a tile of R rows (dK's scale is applied after, in float32). A score
    modifier's chain rule may scale dS without a bound: float32 then."""
    if half != torch.float16:
        return half
    if mod is not None:
        return None
    f = dropout.factor(drop.p) if drop.active else 1.0
    R = q5.shape[2] * min(tiles.block_q, q5.shape[3])
    ds = 2 * f * float(dout.norm(dim=-1).amax()) * float(v.norm(dim=-1).amax())
    worst = max(ds, R * f * float(dout.abs().amax()), ds * float(k.abs().amax()), R * ds * float(q5.abs().amax()))
    return half if half_product_fits(half, worst) else None


def no_batched_mod_params(dims) -> None:
    """Refuse a vmap over a score modifier's own tensors (it reads them itself, unbatched)."""
    if any(d is not None for d in dims):
        raise RuntimeError("vmap over the tensors a score modifier holds is not supported: the modifier reads its "
                           "own copies; vmap over q, k, v (and a float mask) instead")
