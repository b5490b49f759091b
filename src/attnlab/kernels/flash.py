"""Flash attention in plain PyTorch: tiled online softmax with O(L) memory and its own backward.

The matrix form holds all L x S scores at once. This form never does. It walks the keys one tile
at a time, and for every query row keeps three running numbers:

* ``m``   -- the largest score seen so far (the running max),
* ``l``   -- the sum of exp(score - m) so far (the running normaliser),
* ``acc`` -- the sum of exp(score - m) * value so far (the unnormalised output).

When a new tile brings a larger max, everything gathered so far was measured against the old max,
so it is *rescaled* by exp(m_old - m_new) before the tile's own terms are added. After the last
tile, ``acc / l`` is exactly softmax(scores) @ v -- the same numbers the matrix form computes, in
a different order. The forward pass keeps only the output and, per row, the log-sum-exp
``lse = m + log(l)``; the backward pass recomputes each tile's weights from it
(``P = exp(s - lse)``) instead of storing them, following FlashAttention-2:

    dV += P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),   dQ += dS K,   dK += dS^T Q

Masks given as functions (:mod:`attnlab.kernels.masks`) compile to a block map, so tiles that no
query can see are skipped outright and tiles that every query sees need no elementwise mask.
Grouped-query attention reads each key/value head once for all the query heads that share it
(the query heads of a group become extra rows), never materialising repeated K and V.

A score modifier (:mod:`attnlab.mods`) is applied to each tile's scores before the mask. The
backward pass applies the chain rule inside the tile: it recomputes the tile's raw scores, runs
the modifier under autograd, and pulls dS back through it to the raw scores and to any tensor the
modifier holds (a bias table, ALiBi slopes) -- one tile at a time, never L x S.

Papers: Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness"
(2022); Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning"
(2023). The online softmax: Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018).
"""

from __future__ import annotations

import torch

from . import dropout, flash_band
from ._check import check, check_score_mod, empty_output
from .masks import EMPTY, FULL, PARTIAL, Mask, causal
from .mods import Mod, indices

DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_K = 256
# exp(+-40) is comfortably inside float32's normal range (about e^-87 .. e^88), and so is a sum of
# millions of such terms; rows whose scores provably stay within it need no running max.
SAFE_LOGIT = 40.0
# Scores are kept in base-2 units: q is multiplied by scale * log2(e) once, so that exp(x) becomes
# exp2(x * log2(e)) -- the same number -- and torch.exp2 runs about three times faster than torch.exp
# on a CPU (a shift of the exponent plus a short polynomial). lse is handed out in natural units.
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_CAUSAL = causal()  # one instance, so its compiled block maps are cached across calls


class Tiles:
    """What the mask says about tile (qt, kt): EMPTY, FULL or PARTIAL, and the mask of a partial tile.

    Sources: nothing (every tile FULL), a mask function (its cached block map), or a dense tensor
    (bool: sliced per tile, tiles with no visible key skipped; float: added per tile). With
    ``skip_empty=False`` a dense mask's hidden tiles are computed anyway (weight 0), so that a NaN in
    a hidden value still turns the output NaN, as 0 * NaN does in PyTorch.
    """

    def __init__(self, N, H, L, S, block_q, block_k, mask_fn: Mask | None = None,
                 dense: torch.Tensor | None = None, device="cpu", skip_empty: bool = True):
        self.block_q, self.block_k = block_q, block_k
        self.skip_empty = skip_empty
        self.dense = dense
        self.has_bias = dense is not None and dense.dtype != torch.bool  # a float mask: scores unbounded
        self.bm = mask_fn.block_map(N, H, L, S, block_q, block_k, device) if mask_fn is not None else None
        self._kinds = self.bm.kind.tolist() if self.bm is not None else None
        self.band = None  # a flash_band.Plan, when the forward may run as bands instead of tiles

    def scores(self, L: int, S: int) -> int:
        """How many scores per head the tile walk computes: every tile the mask does not skip."""
        if self._kinds is None:
            return L * S
        return sum(kind != EMPTY for row in self._kinds for kind in row) * self.block_q * self.block_k

    def kind(self, qt: int, kt: int, q0: int, q1: int, k0: int, k1: int) -> int:
        if self._kinds is not None:
            return self._kinds[qt][kt]
        if self.dense is None or self.dense.dtype != torch.bool:
            return FULL if self.dense is None else PARTIAL
        t = _slice(self.dense, q0, q1, k0, k1)
        return FULL if bool(t.all()) else (PARTIAL if not self.skip_empty or bool(t.any()) else EMPTY)

    def tile(self, qt: int, kt: int, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
        """The (Nb, Hb, rows, cols) bool or float mask of a PARTIAL tile."""
        if self.bm is not None:
            return self.bm.partial[(qt, kt)]
        return _slice(self.dense, q0, q1, k0, k1)


def _slice(m: torch.Tensor, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
    """Rows q0:q1 and columns k0:k1 of a 4-D mask whose row / column dims may broadcast (size 1)."""
    rows = slice(q0, q1) if m.shape[-2] > 1 else slice(None)
    cols = slice(k0, k1) if m.shape[-1] > 1 else slice(None)
    return m[..., rows, cols]


def _tile(buf: torch.Tensor, shape: tuple) -> torch.Tensor:
    """A contiguous view of the first elements of a flat buffer, in the given shape."""
    n = 1
    for d in shape:
        n *= d
    return buf[:n].view(shape)


def _grouped(t: torch.Tensor, Hkv: int, G: int) -> torch.Tensor:
    """(Nb, Hb, r, c) -> (Nb, Hb', G', r, c) to broadcast against scores viewed as (N, Hkv, G, r, c)."""
    if t.shape[1] == 1:
        return t[:, :, None]
    return t.reshape(t.shape[0], Hkv, G, t.shape[2], t.shape[3])


def _mask_scores(s5: torch.Tensor, tile: torch.Tensor, Hkv: int, G: int) -> None:
    """In place on the (N, Hkv, G, r, c) base-2 scores: bool tile -> -inf where False; float tile -> added
    (times log2(e), as the scores are)."""
    t = _grouped(tile, Hkv, G)
    if t.dtype == torch.bool:
        s5.masked_fill_(~t, float("-inf"))
    else:
        s5.add_(t.to(s5.dtype), alpha=LOG2E)


def _keep(seed, p, N, Hkv, G, q0, q1, k0, k1, row0, col0, like: torch.Tensor):
    """The dropout keep-mask of one tile, scaled by 1/(1-p), laid out as (N, Hkv, G*rows, cols)."""
    rows = torch.arange(row0 + q0, row0 + q1)
    cols = torch.arange(col0 + k0, col0 + k1)
    keep = dropout.keep_mask(seed, p, N, Hkv * G, rows, cols, like.device)
    return keep.reshape(N, Hkv, G * (q1 - q0), k1 - k0).to(like.dtype) * dropout.factor(p)


def _modify(mod: Mod, s: torch.Tensor, G: int, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
    """Apply a score modifier to a tile's natural-unit scores (N, Hkv, G*r, c), seen as (N, H, r, c)."""
    N, Hkv, _, c = s.shape
    s4 = s.view(N, Hkv * G, q1 - q0, c)  # query head h = hk * G + g: the order of the caller's heads
    return mod.apply(s4, *indices(N, Hkv * G, q0, q1, k0, k1, s.device)).view(N, Hkv, -1, c)


def forward_tiles(q5, k, v, scale, tiles: Tiles, seed=0, p=0.0, row0=0, col0=0, mod: Mod | None = None,
                  keep_norm=False):
    """Online-softmax forward. q5 (N, Hkv, G, L, E), k (N, Hkv, S, E), v (N, Hkv, S, Ev).

    Returns ``out`` (N, Hkv, G, L, Ev) and ``lse`` (N, Hkv, G, L); rows with no visible key get
    out = 0 and lse = -inf. ``row0`` / ``col0`` place this block in a larger problem (for dropout and
    the positions a score modifier ``mod`` sees).
    ``keep_norm=True`` also returns ``(m, l)`` (N, Hkv, G, L) in the working dtype, each row's final
    shift and normaliser, so that backward can rebuild the weights exactly as forward divided them.
    """
    N, Hkv, G, L, E = q5.shape
    S, Ev = k.shape[2], v.shape[3]
    bq, bk = tiles.block_q, tiles.block_k
    out = q5.new_empty(N, Hkv, G, L, Ev)
    lse = q5.new_empty(N, Hkv, G, L, dtype=torch.float64)
    m_all, l_all = (q5.new_empty(N, Hkv, G, L) for _ in range(2)) if keep_norm else (None, None)
    kT = k.transpose(-2, -1)  # (N, Hkv, E, S)
    v3 = v.reshape(N * Hkv, S, Ev)
    buf = q5.new_empty(N * Hkv * G * min(bq, L) * min(bk, S))  # one score tile, reused: no allocation per tile
    k_norm = k.norm(dim=-1).amax(dim=-1, keepdim=True)  # (N, Hkv, 1): the longest key of each head
    for qt, q0 in enumerate(range(0, L, bq)):
        q1 = min(L, q0 + bq)
        r = q1 - q0
        qi = (q5[:, :, :, q0:q1] * (scale * LOG2E)).reshape(N, Hkv, G * r, E)  # scale and log2(e) folded into q
        # |q.k| <= |q| |k|: when no score of this row block can leave [-SAFE_LOGIT, SAFE_LOGIT], exp can
        # neither overflow nor underflow, the running max is not needed, and the shift stays 0.
        bounded = (not tiles.has_bias and mod is None
                   and float((qi.norm(dim=-1) * k_norm).max()) <= SAFE_LOGIT * LOG2E)
        m = q5.new_full((N, Hkv, G * r), 0.0 if bounded else float("-inf"))  # running max (the shift)
        l = q5.new_zeros(N * Hkv, G * r)  # running normaliser
        acc = q5.new_zeros(N * Hkv, G * r, Ev)  # running unnormalised output
        for kt, k0 in enumerate(range(0, S, bk)):
            k1 = min(S, k0 + bk)
            kind = tiles.kind(qt, kt, q0, q1, k0, k1)
            if kind == EMPTY:
                continue  # no query in this tile sees any key in it
            s = torch.matmul(qi, kT[..., k0:k1], out=_tile(buf, (N, Hkv, G * r, k1 - k0)))  # scores
            if mod is not None:  # the modifier sees natural units
                s = _modify(mod, s.mul_(LN2), G, row0 + q0, row0 + q1, col0 + k0, col0 + k1).mul_(LOG2E)
            if kind == PARTIAL:
                _mask_scores(s.view(N, Hkv, G, r, k1 - k0), tiles.tile(qt, kt, q0, q1, k0, k1), Hkv, G)
            if bounded:
                s.exp2_()  # unnormalised weights, shift 0
            else:
                m_new = torch.maximum(m, s.amax(dim=-1))
                if kind == PARTIAL:  # a row may have seen nothing yet: keep exp(-inf - -inf) from making NaN
                    m_new = torch.where(torch.isneginf(m_new), 0.0, m_new)
                s.sub_(m_new.unsqueeze(-1)).exp2_()  # s is now exp(score - m): unnormalised weights
                alpha = torch.exp2(m - m_new).view(N * Hkv, G * r)  # rescale what was gathered to the new max
                l.mul_(alpha)
                acc.mul_(alpha.unsqueeze(-1))
                m = m_new
            s3 = s.view(N * Hkv, G * r, k1 - k0)
            l.add_(s3.sum(dim=-1))  # the normaliser counts the weights before dropout
            if p > 0.0:
                s.mul_(_keep(seed, p, N, Hkv, G, q0, q1, k0, k1, row0, col0, s))
            acc.baddbmm_(s3, v3[:, k0:k1])  # acc += weights @ v
        l = l.unsqueeze(-1)
        o = acc / torch.where(l == 0, 1.0, l)  # rows with no visible key: 0, not 0/0
        out[:, :, :, q0:q1] = o.view(N, Hkv, G, r, Ev)
        if keep_norm:  # dead rows: shift 0 and normaliser 1, so that backward's exp(-inf - 0) / 1 = 0
            m_all[:, :, :, q0:q1] = torch.where(torch.isneginf(m), 0.0, m).view(N, Hkv, G, r)
            l_all[:, :, :, q0:q1] = torch.where(l == 0, 1.0, l).view(N, Hkv, G, r)
        m = torch.where(l.view(N, Hkv, G * r) == 0, float("-inf"), m)
        lse2 = m.double() + torch.log2(l.double()).view(N, Hkv, G * r)  # base-2 units ...
        lse[:, :, :, q0:q1] = (lse2 * LN2).view(N, Hkv, G, r)  # ... handed out in natural ones
    if keep_norm:
        return out, lse, (m_all, l_all)
    return out, lse


def backward_tiles(q5, k, v, out, dout, lse, scale, tiles: Tiles, seed=0, p=0.0, row0=0, col0=0,
                   bias_shape=None, D=None, norm=None, mod: Mod | None = None, mod_params=()):
    """FlashAttention-2 backward by recomputation. Returns dq5, dk, dv and (if ``bias_shape``) dbias.

    ``lse`` may come from a larger problem (ring attention passes the global one), as may ``D``,
    the per-row rowsum(dO * O); both default to this block's own. With a score modifier ``mod``,
    dS is pulled back through it tile by tile, and the gradients of the tensors in ``mod_params``
    are returned as a fifth item (a list).

    dS = P * (dP - D) must cancel exactly where the true gradient is zero (a row that sees one key:
    P = 1, dP = D). So with ``norm`` = forward's ``(m, l)`` the weights are rebuilt exactly as forward
    made them, P = exp(s - m) / l (a lone key's weight is e / e = 1, not exp(s - lse) = 1 +- ulp), and
    D is not taken from the saved output but summed, in a first pass over the row block's key tiles,
    as rowsum(P * dP) from the very P and dP the second pass uses (equal to rowsum(dO * O) in exact
    arithmetic): the two round alike and cancel.
    """
    N, Hkv, G, L, E = q5.shape
    S, Ev = k.shape[2], v.shape[3]
    H = Hkv * G
    bq, bk = tiles.block_q, tiles.block_k
    # lse is float64; subtracting a float64 column from float32 scores would run the whole tile in
    # float64 (30x slower). Split it: hi (the working dtype) is subtracted from the scores, and the
    # remainder becomes a per-row factor c = exp(hi - lse) ~ 1, folded into dO and D, which are small.
    if norm is not None:  # this block's own shift and normaliser: no correction factor needed
        hi, corr = norm[0], torch.ones_like(norm[0])
    else:  # in base-2 units, as the scores are: lse * log2(e)
        lse2 = lse * LOG2E
        hi = torch.where(torch.isneginf(lse2), float("inf"), lse2).to(q5.dtype)  # dead rows: P = exp(-inf) = 0
        corr = torch.exp2(hi.double() - lse2).to(q5.dtype)
        corr = torch.where(torch.isfinite(corr), corr, 1.0)
    dq5 = torch.zeros_like(q5)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    dbias = q5.new_zeros(bias_shape) if bias_shape is not None else None
    dparams = [None] * len(mod_params)
    n_tile = N * Hkv * G * min(bq, L) * min(bk, S)
    buf_s, buf_dp = q5.new_empty(n_tile), q5.new_empty(n_tile)  # two tiles, reused: no allocation per tile
    for qt, q0 in enumerate(range(0, L, bq)):
        q1 = min(L, q0 + bq)
        r = q1 - q0
        qi = (q5[:, :, :, q0:q1] * scale).reshape(N, Hkv, G * r, E)
        ci = corr[:, :, :, q0:q1].reshape(N, Hkv, G * r, 1)
        doi = dout[:, :, :, q0:q1].reshape(N, Hkv, G * r, Ev) * ci  # c * dO
        li = hi[:, :, :, q0:q1].reshape(N, Hkv, G * r, 1)
        ni = norm[1][:, :, :, q0:q1].reshape(N, Hkv, G * r, 1) if norm is not None else None
        rows_args = (qi * LOG2E, k, v, doi, li, ni, tiles, qt, q0, q1, buf_s, buf_dp, seed, p, row0, col0, mod)
        if D is None:  # c * D, from the same P and dP as below, so that dP - D cancels where it should
            Di = q5.new_zeros(N, Hkv, G * r, 1)
            for _, _, P, dP, _, _ in _key_tiles(*rows_args):
                Di.add_(P.mul_(dP).sum(dim=-1, keepdim=True))  # P is rebuilt in the second pass
        else:
            Di = D[:, :, :, q0:q1].reshape(N, Hkv, G * r, 1) * ci  # c * D
        dqi = torch.zeros_like(qi)
        for k0, k1, P, dP, keep, through in _key_tiles(*rows_args):
            dv[:, :, k0:k1] += torch.matmul((P if keep is None else P * keep).transpose(-2, -1), doi)
            dS = dP.sub_(Di).mul_(P)  # dS = P * (dP - D)
            if dbias is not None:
                _add_bias_grad(dbias, dS.view(N, H, r, k1 - k0), q0, q1, k0, k1)
            if through is not None:  # chain rule through the modifier: dS to the raw scores and its tensors
                dS, dparams = _through_mod(*through, mod_params, dS, dparams)
            dqi.add_(torch.matmul(dS, k[:, :, k0:k1]))
            dk[:, :, k0:k1] += torch.matmul(dS.transpose(-2, -1), qi)  # qi holds q * scale
        dq5[:, :, :, q0:q1] = (dqi * scale).view(N, Hkv, G, r, E)
    if mod is not None:
        return dq5, dk, dv, dbias, dparams
    return dq5, dk, dv, dbias


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


def _key_tiles(qi, k, v, doi, li, ni, tiles, qt, q0, q1, buf_s, buf_dp, seed, p, row0, col0, mod=None):
    """Each visible key tile of one row block: (k0, k1, P, dP, keep, through), weights rebuilt, dP = c dO V^T.

    ``qi`` (N, Hkv, G*r, E) holds q * scale * log2(e) (base-2 scores); ``li`` / ``ni`` (N, Hkv, G*r, 1) the
    shift and (or None)
    the normaliser to rebuild P with. P and dP live in the two reused buffers: use them before the next.
    With a score modifier ``mod``, ``through`` is (modified scores, raw scores) with the graph between
    them, for the chain rule; else None.
    """
    N, Hkv, R, _ = qi.shape
    G, r = R // (q1 - q0), q1 - q0
    S, bk = k.shape[2], tiles.block_k
    kT = k.transpose(-2, -1)
    for kt, k0 in enumerate(range(0, S, bk)):
        k1 = min(S, k0 + bk)
        kind = tiles.kind(qt, kt, q0, q1, k0, k1)
        if kind == EMPTY:
            continue
        c = k1 - k0
        s = torch.matmul(qi, kT[..., k0:k1], out=_tile(buf_s, (N, Hkv, R, c)))
        through = None
        if mod is not None:  # the modified scores, with the graph that leads back to the raw ones (natural units)
            raw = (s * LN2).requires_grad_(True)
            with torch.enable_grad():
                modded = _modify(mod, raw, G, row0 + q0, row0 + q1, col0 + k0, col0 + k1)
            s = modded.detach() * LOG2E
            through = (modded, raw)
        if kind == PARTIAL:
            _mask_scores(s.view(N, Hkv, G, r, c), tiles.tile(qt, kt, q0, q1, k0, k1), Hkv, G)
        P = s.sub_(li).exp2_()  # the tile's weights (times 1/c), recomputed from the saved log-sum-exp
        if ni is not None:
            P.div_(ni)  # exp(s - m) / l, divided as forward divided: a lone key's weight is exactly 1
        dP = torch.matmul(doi, v[:, :, k0:k1].transpose(-2, -1), out=_tile(buf_dp, (N, Hkv, R, c)))
        keep = _keep(seed, p, N, Hkv, G, q0, q1, k0, k1, row0, col0, s) if p > 0.0 else None
        if keep is not None:
            dP.mul_(keep)
        yield k0, k1, P, dP, keep, through


def _add_bias_grad(dbias: torch.Tensor, dS: torch.Tensor, q0, q1, k0, k1) -> None:
    """Add a tile's dS (N, H, r, c) to the gradient of a float mask, summed over its broadcast dims."""
    dims = [d for d in range(4) if dbias.shape[d] == 1 and dS.shape[d] != 1]
    g = dS.sum(dim=dims, keepdim=True) if dims else dS
    _slice(dbias, q0, q1, k0, k1).add_(g)


class _Flash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q5, k, v, bias, tiles, scale, seed, p, mod=None, *mod_params):
        if tiles.band is not None and p == 0.0 and mod is None:
            out, lse, (m, l) = flash_band.forward(q5, k, v, scale, tiles.band, SAFE_LOGIT)
        else:
            out, lse, (m, l) = forward_tiles(q5, k, v, scale, tiles, seed, p, mod=mod, keep_norm=True)
        ctx.save_for_backward(q5, k, v, bias, out, lse, m, l)
        ctx.cfg = (tiles, scale, seed, p, mod)
        ctx.mod_params = mod_params  # the modifier reads these itself; kept here for the chain rule
        return out

    @staticmethod
    def backward(ctx, dout):
        q5, k, v, bias, out, lse, m, l = ctx.saved_tensors
        tiles, scale, seed, p, mod = ctx.cfg
        want_bias = bias is not None and ctx.needs_input_grad[3]
        want = [t if ctx.needs_input_grad[9 + i] else None for i, t in enumerate(ctx.mod_params)]
        grads = backward_tiles(q5, k, v, out, dout.contiguous(), lse, scale, tiles, seed, p,
                               bias_shape=bias.shape if want_bias else None, norm=(m, l), mod=mod, mod_params=want)
        dparams = grads[4] if mod is not None else []
        return (*grads[:4], None, None, None, None, None, *dparams)


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, block_q: int = DEFAULT_BLOCK_Q, block_k: int = DEFAULT_BLOCK_K,
              score_mod=None, bands: bool = True):
    """The flash form. ``block_q`` / ``block_k``: tile sizes (any L, S; tiles need not divide them).

    ``bands``: with a sparse mask function (a sliding window, documents), run the forward as one
    contiguous key band per query tile (:mod:`attnlab.kernels.flash_band`); False walks the tiles.

    ``score_mod(score, b, h, q_idx, kv_idx)`` (:mod:`attnlab.mods`) changes each tile's scaled scores
    before the mask; gradients reach q, k, v and the tensors the modifier holds.
    """
    a = check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    mod = check_score_mod(score_mod)
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ValueError(f"{name} must be a positive integer tile size, got {b!r}")
    if a.trivial:  # an empty dim: nothing to attend to
        return a.unflatten(empty_output(a))
    work = torch.float32 if a.q.dtype in (torch.float16, torch.bfloat16) else a.q.dtype
    q5 = a.q.to(work).reshape(a.N, a.Hkv, a.groups, a.L, a.E)  # query heads grouped by their key head
    k, v = a.k.to(work).contiguous(), a.v.to(work).contiguous()
    mask_fn = _CAUSAL if a.is_causal else a.mask
    bias = a.attn_mask.to(work) if a.attn_mask is not None and a.attn_mask.dtype != torch.bool else None
    dense = a.attn_mask if bias is None else bias
    skip = dense is None or bool(torch.isfinite(v).all())  # hidden NaN values must still reach the output
    tiles = Tiles(a.N, a.H, a.L, a.S, min(block_q, a.L), min(block_k, a.S), mask_fn, dense, a.q.device, skip)
    if bands and mask_fn is not None and dense is None and mod is None and a.dropout_p == 0:
        band = flash_band.plan(mask_fn, a.N, a.H, a.L, a.S, flash_band.BAND_BLOCK_Q, a.q.device)
        if band is not None and band.scores <= flash_band.SHARE_OF_TILES * tiles.scores(a.L, a.S):
            tiles.band = band  # documents aligned to the tiles: the tile walk has no waste to save
    seed = dropout.draw_seed() if a.dropout_p > 0 else 0
    params = mod.params if mod is not None else ()
    out5 = _Flash.apply(q5, k, v, bias, tiles, a.scale, seed, a.dropout_p, mod, *params)  # (N, Hkv, G, L, Ev)
    return a.unflatten(out5.reshape(a.N, a.H, a.L, a.Ev).to(a.q.dtype))
