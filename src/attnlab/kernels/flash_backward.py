"""The flash form's backward: FlashAttention-2 by recomputation, one query tile at a time.

Each tile's weights are rebuilt from what the forward saved per row (:class:`Weights`: the flash
form's own shift and normaliser, or ring attention's global log-sum-exp), never stored:

    dV += P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),   dQ += dS K,   dK += dS^T Q

The loop over a query tile's key tiles is :func:`backward_tile`, shaped like the forward's
(:func:`attnlab.kernels.flash.attend`): load a key tile, score, modify, mask, rebuild the weights, then the five
products. With attention sinks the weights rebuilt are the whole row's (the forward folded each sink into the saved
shift and normaliser), so the loop is unchanged, and the sinks' gradient is one per-row sum (:meth:`Weights.sink_grad`).
With a score modifier, dS is pulled back through it inside the tile, to the raw scores and to any tensor
the modifier holds: in closed form for a fused one (its ``grad``, [P12]), else by the chain rule under autograd.
:class:`FlashBackward` is this pass as an autograd Function of its own, so that it can itself be vmapped. The tags
[P1] .. [P13] are the performance notes in :mod:`attnlab.kernels.flash`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import dropout, online, vmap_loop
from .dropout import NO_DROPOUT, Dropout
from .dtypes import half_product_fits
from .flash_tiles import Buffers, Keys, Tiles, buffer_view, mask_slice, rounded
from .masks import PARTIAL
from .mods import Mod
from .online import LOG2E


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
    def from_norm(cls, m: torch.Tensor, l: torch.Tensor, D: torch.Tensor, sinks: bool = False) -> Weights:
        """``sinks``: the forward folded sinks into (m, l); a row that sees one key then does not give it all its
        weight, its gradient is not 0, and [P10]'s exact zeros must not be written."""
        return cls(m, D, norm=l, whole=not sinks)

    @classmethod
    def from_lse(cls, lse: torch.Tensor, D: torch.Tensor, dtype: torch.dtype) -> Weights:
        hi, corr = online.shift_of_lse(lse, dtype)  # [P4] [P8]; dead rows: P = exp2(s - inf) = 0
        return cls(hi, D, corr)

    def sink_grad(self, sinks: torch.Tensor) -> torch.Tensor:
        """The gradient of the sink logits ``sinks`` (H,) (natural units), from each row's saved numbers alone.

        The sink is column S of a softmax over S + 1 columns whose dP is 0 (it carries no value), so
        dS_sink = P_sink (0 - D) with D = rowsum(P dP) = rowsum(dO * O) [P10], and

            dsink_h = - sum over the batch and the rows of query head h of  P_sink * D,
            P_sink  = exp2(sink - shift) / norm   (the forward's own numbers, sink included [P8])

        -- O(rows), no pass over the scores. A row that sees no key has P_sink = 1 and O = 0, so D = 0: it adds
        nothing (its output is 0 whatever the sink). Rows are (N, Hkv, G, L): query head h = hk * G + g."""
        N, Hkv, G, L = self.shift.shape
        p = torch.exp2((sinks * LOG2E).view(1, Hkv, G, 1) - self.shift)
        if self.norm is not None:
            p = p / self.norm
        if self.corr is not None:  # [P4] the true weight is exp2(s - hi) * corr
            p = p * self.corr
        return -(p * self.D).sum(dim=(0, 3)).reshape(Hkv * G)

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


@dataclass(frozen=True)
class QueryTile:
    """One query tile on the backward's way: its rows and what forward saved for them, rows as (N, Hkv, G*r, .)."""

    qt: int
    rows: slice
    q: torch.Tensor  # (N, Hkv, G*r, E)
    do: torch.Tensor  # c * dO (N, Hkv, G*r, Ev) [P4]
    shift: torch.Tensor  # (N, Hkv, G*r, 1): P = exp2(s - shift) [/ norm]
    norm: torch.Tensor | None
    D: torch.Tensor  # c * rowsum(dO * O) [P10]
    lone: torch.Tensor | None  # [P10] its rows that see exactly one key: dS = 0 there


@dataclass
class Grads:
    """What the backward sums: dq (N, Hkv, G, L, E), dk, dv (N, Hkv, S, .), dbias (the float mask's shape, or None)
    and one gradient per modifier tensor asked for (None until a tile adds to it)."""

    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    dbias: torch.Tensor | None
    dparams: list

    def add_param(self, i: int, g: torch.Tensor | None) -> None:
        if g is not None:
            self.dparams[i] = g if self.dparams[i] is None else self.dparams[i] + g


def backward_tiles(q, k, v, dout, scale, tiles: Tiles, weights: Weights, drop: Dropout = NO_DROPOUT,
                   mod: Mod | None = None, *, bias_shape=None, mod_params=(), half: torch.dtype | None = None):
    """FlashAttention-2 backward by recomputation. Returns dq, dk, dv and (if ``bias_shape``) dbias.

    ``weights`` says how each tile's weights are rebuilt (:class:`Weights`). With a score modifier
    ``mod``, dS is pulled back through it tile by tile, and the gradients of the tensors in
    ``mod_params`` are returned as a fifth item (a list). [P7] The outer loop is over query tiles.
    ``half``: the inputs' half dtype (q, k, v and dout hold half values, upcast): P^T dO, dS K and
    dS^T Q are half-precision matmuls of P and dS rounded to it [P11]; the scores, dP, D and dS are
    float32, and so are the sums dq, dk, dv.
    """
    N, Hkv, G, L, E = q.shape
    g = Grads(torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v),
              q.new_zeros(bias_shape) if bias_shape is not None else None, [None] * len(mod_params))
    keys = Keys.of(q, k, tiles, drop, mod, scale)
    n = N * Hkv * G * min(tiles.block_q, L) * min(tiles.block_k, k.shape[2])
    fused = keys.score.fused
    bufs = Buffers.of(q, n, fused is not None and fused.scratch, half)  # [P3] scores, the slope [P12], P or dS [P11]
    dP_buf = q.new_empty(n)  # [P3] dP
    k_half = k.to(half) if half is not None else None  # [P11] exact: k holds half values, upcast
    for qt, rows in tiles.query_tiles():
        # -- this query tile, and its rows' saved numbers --
        do, shift, norm, D = weights.rows(rows, dout)
        lone = _lone_rows(tiles, qt, rows, N, Hkv, G) if weights.whole else None  # [P10]
        qi = q[:, :, :, rows].reshape(N, Hkv, G * (rows.stop - rows.start), E)
        dqi = backward_tile(QueryTile(qt, rows, qi, do, shift, norm, D, lone), keys, k, k_half, v, bufs, dP_buf, g,
                            mod_params, scale)
        g.dq[:, :, :, rows] = (dqi * scale).view(N, Hkv, G, rows.stop - rows.start, E)
    if half is not None:
        g.dk.mul_(scale)
    if mod is not None:
        return g.dq, g.dk, g.dv, g.dbias, g.dparams
    return g.dq, g.dk, g.dv, g.dbias


def backward_tile(t: QueryTile, keys: Keys, k, k_half, v, bufs: Buffers, dP_buf, g: Grads, mod_params,
                  scale: float) -> torch.Tensor:
    """THE BACKWARD LOOP: one query tile against its key tiles; adds to dK, dV (and dbias, the modifier's tensors)
    in ``g`` and returns the tile's dQ / scale. ``k_half``: k in the half dtype of the weight matmuls [P11], else
    None. [P1] The scores are made by the same product as forward's, so P is rebuilt bit for bit."""
    N, Hkv, R, E = t.q.shape
    half = bufs.half is not None
    q_half, do_half = (t.q.reshape(N * Hkv, R, E).to(bufs.half.dtype), t.do.to(bufs.half.dtype)) if half else (None,
                                                                                                                 None)
    dk_bmm = g.dk.view(N * Hkv, *g.dk.shape[2:])  # (N*Hkv, S, E): the same memory, for batched matmuls
    dqi = torch.zeros_like(t.q)
    for kt, cols, kind in keys.tiles.key_tiles(t.qt, t.rows):  # -- 1. load a key tile --
        s = keys.product(t.q, bufs.scores, cols)  # -- 2. score, as forward did [P1] --
        s, through = keys.modify_for_grad(s, t.rows, cols, bufs)  # -- 3. modify, keeping what the chain rule needs
        if kind == PARTIAL:  # -- 4. mask --
            keys.tiles.mask(s, t.qt, kt, t.rows, cols, keys.score.G)
        P = s.sub_(t.shift).exp2_()  # -- 5. the weights, rebuilt from the saved shift (and normaliser) [P8] --
        if t.norm is not None:
            P.div_(t.norm)  # exp(s - m) / l, divided as forward divided: a lone key's weight is exactly 1
        # -- 6. dV += P^T dO and dP = dO V^T, dropped where forward dropped --
        dP = torch.matmul(t.do, v[:, :, cols].transpose(-2, -1), out=buffer_view(dP_buf, P.shape))
        keep = keys.keep(s, t.rows, cols)
        Pk = P if keep is None else P * keep
        if keep is not None:
            dP.mul_(keep)
        if not half:
            g.dv[:, :, cols] += torch.matmul(Pk.transpose(-2, -1), t.do)
        else:  # [P11] P rounded to the input dtype; the half product is added into the float32 dV
            g.dv[:, :, cols] += torch.matmul(rounded(bufs.half, Pk).transpose(-2, -1), do_half)
        # -- 7. dS = P (dP - D), through the modifier to the raw scores --
        dS = dP.sub_(t.D).mul_(P)  # D from forward's output [P10]
        if t.lone is not None:
            dS.masked_fill_(t.lone, 0.0)  # [P10] one visible key: its weight is 1 whatever its score
        if g.dbias is not None:
            _add_bias_grad(g.dbias, keys.heads(dS), t.rows, cols)
        dS = _through(keys, dS, through, t.rows, cols, g, mod_params)
        # -- 8. dQ += dS K (this tile's own), dK += scale dS^T Q [P1] --
        if not half:
            dqi.add_(torch.matmul(dS, k[:, :, cols]))
            dk_bmm[:, cols].baddbmm_(dS.view(N * Hkv, R, -1).transpose(1, 2), t.q.reshape(N * Hkv, R, E), alpha=scale)
        else:  # [P11] dS rounded to the input dtype once, for both half products; dk scaled at the end
            dS_half = rounded(bufs.half, dS)
            dqi.add_(torch.matmul(dS_half, k_half[:, :, cols]))
            dk_bmm[:, cols].add_(torch.bmm(dS_half.view(N * Hkv, R, -1).transpose(1, 2), q_half))
    return dqi


def _lone_rows(tiles: Tiles, qt: int, rows: slice, N: int, Hkv: int, G: int) -> torch.Tensor | None:
    """[P10] The rows of a query tile that see exactly one key, as a bool (Nb, Hkv, G*r, 1) for dS's rows, or None."""
    lone = tiles.lone(qt, rows)  # (Nb, Hb, r), query heads h = hk * G + g
    if lone is None:
        return None
    Nb, r = lone.shape[0], rows.stop - rows.start
    return lone.expand(Nb, Hkv * G, r).reshape(Nb, Hkv, G * r, 1)


def _through(keys: Keys, dS, through, rows: slice, cols: slice, g: Grads, params) -> torch.Tensor:
    """dS (N, Hkv, G*r, c) w.r.t. the modified scores -> w.r.t. the raw ones, and the modifier's tensors' gradients
    added to ``g``: in closed form for a fused modifier [P12] (its ``grad``: the soft-cap's slope, a bias's sum),
    by autograd through the graph ``through`` = (modified, raw) for a function."""
    fused = keys.score.fused
    if fused is not None:
        g.add_param(0, fused.grad(keys.heads(dS), rows, cols, through, bool(params) and params[0] is not None))
        return dS
    if through is None:
        return dS
    modded, raw = through
    want = [t for t in params if t is not None]
    grads = torch.autograd.grad(modded, [raw, *want], dS, allow_unused=True)
    it = iter(grads[1:])
    for i, t in enumerate(params):
        if t is not None:
            g.add_param(i, next(it))
    return grads[0]


def _add_bias_grad(dbias: torch.Tensor, dS: torch.Tensor, rows: slice, cols: slice) -> None:
    """Add a tile's dS (N, H, r, c) to the gradient of a float mask, summed over its broadcast dims."""
    dims = [d for d in range(4) if dbias.shape[d] == 1 and dS.shape[d] != 1]
    g = dS.sum(dim=dims, keepdim=True) if dims else dS
    mask_slice(dbias, rows, cols).add_(g)


class FlashBackward(torch.autograd.Function):
    """(dout, q, k, v, bias, sinks, m, l, out, cfg, wants, *mod_params) -> (dq, dk, dv, dbias or None,
    dsinks or None, *dparams).

    ``out`` is forward's own output in the working dtype (before any rounding to a half input dtype): D = rowsum(dO * O)
    is taken from it [P10], and so is the sinks' gradient (:meth:`Weights.sink_grad`). ``wants``: (dbias, dsinks,
    then one per modifier tensor)."""

    @staticmethod
    def forward(dout, q, k, v, bias, sinks, m, l, out, cfg, wants, *mod_params):
        tiles, scale, drop, mod, half = cfg
        want = [t if w else None for t, w in zip(mod_params, wants[2:], strict=True)]
        dout = dout.contiguous()
        half = _backward_half(half, q, k, v, dout, tiles, drop, mod)
        weights = Weights.from_norm(m, l, delta(dout, out), sinks=sinks is not None)
        grads = backward_tiles(q, k, v, dout, scale, tiles, weights, drop, mod,
                               bias_shape=bias.shape if wants[0] else None, mod_params=want, half=half)
        dsinks = weights.sink_grad(sinks) if wants[1] else None
        return (*grads[:4], dsinks, *(grads[4] if mod is not None else ()))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("the flash form's backward pass is not differentiable (no double backward, "
                           "e.g. create_graph=True then a second grad); the matrix form's is")

    @staticmethod
    def vmap(info, in_dims, *args):
        no_batched_mod_params(in_dims[11:])
        return vmap_loop.loop(FlashBackward, info, in_dims, *args)


def _backward_half(half, q, k, v, dout, tiles: Tiles, drop: Dropout, mod) -> torch.dtype | None:
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
    R = q.shape[2] * min(tiles.block_q, q.shape[3])
    ds = 2 * f * online.qk_bound(dout, v)  # |dO_i . v_j| <= |dO_i| |v_j|
    worst = max(ds, R * f * float(dout.abs().amax()), ds * float(k.abs().amax()), R * ds * float(q.abs().amax()))
    return half if half_product_fits(half, worst) else None


def no_batched_mod_params(dims) -> None:
    """Refuse a vmap over a score modifier's own tensors (it reads them itself, unbatched)."""
    if any(d is not None for d in dims):
        raise RuntimeError("vmap over the tensors a score modifier holds is not supported: the modifier reads its "
                           "own copies; vmap over q, k, v (and a float mask) instead")
