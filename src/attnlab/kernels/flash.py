"""Flash attention in plain PyTorch: tiled online softmax with O(L) memory and its own backward.

Read this first: :mod:`attnlab.explore.online_softmax` (``attnlab explore online-softmax``)
runs the same online softmax on ONE query row, one key tile at a time, and records every number.
This file is that loop for every row at once and the form around it; its tiles and their scores are
:mod:`attnlab.kernels.flash_tiles`, its backward pass :mod:`attnlab.kernels.flash_backward`, and the
tricks that make them fast are tagged [P1] .. [P12] below.

The matrix form holds all L x S scores at once. This form never does. It walks the keys one tile
at a time, and for every query row keeps three running numbers:

* ``m``   -- the largest score seen so far (the running max),
* ``l``   -- the sum of exp(score - m) so far (the running normaliser),
* ``acc`` -- the sum of exp(score - m) * value so far (the unnormalised output).

When a new tile brings a larger max, everything gathered so far was measured against the old max,
so it is *rescaled* by exp(m_old - m_new) before the tile's own terms are added. After the last
tile, ``acc / l`` is exactly softmax(scores) @ v -- the same numbers the matrix form computes, in
a different order. These rules (the running numbers, the rescale, the finish with its rule for rows
that see no key, the merge of partial results, the base-2 constants) live in
:mod:`attnlab.kernels.online`; this file walks the tiles and feeds them. The forward pass keeps
only the output and, per row, the log-sum-exp ``lse = m + log(l)``; the backward pass recomputes
each tile's weights from it (``P = exp(s - lse)``) instead of storing them, following FlashAttention-2:

    dV += P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),   dQ += dS K,   dK += dS^T Q

Masks given as functions (:mod:`attnlab.kernels.masks`) compile to a block map, so tiles that no
query can see are skipped outright and tiles that every query sees need no elementwise mask.
Grouped-query attention reads each key/value head once for all the query heads that share it
(the query heads of a group become extra rows), never materialising repeated K and V.

A score modifier (:mod:`attnlab.mods`) is applied to each tile's scores before the mask. The
backward pass applies the chain rule inside the tile: it recomputes the tile's raw scores, runs
the modifier under autograd, and pulls dS back through it to the raw scores and to any tensor the
modifier holds (a bias table, ALiBi slopes; listed in its ``params`` or not: :func:`attnlab.mods.unlisted`
finds the others) -- one tile at a time, never L x S. A modifier that hides every key of a row
(-inf) leaves it all zeros, as a mask does; one that changes its input in place gets a copy there.

Shapes. The query heads of a group are extra rows: q5 (N, Hkv, G, L, E) is read one query tile
of r rows at a time as ``qi`` (N, Hkv, G*r, E). In the forward loop the running numbers of those
rows are ``m`` and ``l`` (N*Hkv, G*r) and ``acc`` (N*Hkv, G*r, Ev): one batch dimension, so that
``acc += weights @ v`` is one batched matmul into ``acc`` itself.

Performance notes -- each trick is tagged [P1] .. [P12] at its line:

* [P1] The scale is applied by the matmul itself: ``baddbmm(..., beta=0, alpha=scale)`` multiplies
  each finished dot product, for free, instead of a pass over every tile of scores. (Folding it into
  q first, ``q * scale``, is free too, but rounds every element of q before the sum: with large
  logits that tripled the float32 error against PyTorch's; see docs/flash.md.) dK's ``scale`` rides
  on its matmul the same way.
* [P2] The bounded path. For any query row and key, |q.k| <= |q| |k| <= max|q| * max|k| over the
  query tile and the head's keys. When that bound is at most SAFE_LOGIT (40), no score can leave
  [-40, 40], so exp(score) neither overflows nor underflows float32 (about e^-87 .. e^88): the
  running max is not needed and the shift stays 0. Each tile then skips the max, the rescale of
  ``l`` and ``acc`` and the -inf guard (:func:`_bounded_row_block`); every other query tile takes
  the running max (:func:`_online_row_block`). A float mask or a score modifier can move scores
  anywhere, so it always takes the running max.
* [P3] Buffer reuse. Each tile's scores are written by ``matmul(..., out=)`` into one flat buffer
  allocated once per call; ``flash_tiles.buffer_view`` gives the first rows x cols elements of it
  in the tile's shape (edge tiles are smaller). The exp, the mask and dropout then work in place. The backward
  reuses two such buffers (scores and dP). No allocation per tile.
* [P4] A float64 lse, float32 tiles. The saved log-sum-exp is float64 (ring attention merges many
  partial results through it), but subtracting a float64 column from float32 scores would run the
  whole tile in float64 (about 30x slower). With hi = lse rounded to the working dtype,

      exp(s - lse) = exp(s - hi) * exp(hi - lse) = exp(s - hi) * corr,

  so the tile subtracts hi in float32, and corr (about 1) is a per-row factor folded into dO and D,
  which are small (``flash_backward.Weights``).
* [P5] Tiles of 256 x 256 (DEFAULT_BLOCK_Q / DEFAULT_BLOCK_K). Each tile costs about a dozen tensor
  calls whatever its size, so a tile must be large for the arithmetic to outweigh Python and
  dispatch; the memory stays O(tile), never L x S. Which size is fastest depends on the processor:
  ``attnlab tune`` measures candidates beside these defaults and caches a faster one (:mod:`tuned`),
  which every call without sizes of its own takes; the benchmarks record the sizes they ran with. A
  query block shorter than a tile (decoding: one query, S keys) takes TILE_SCORES // L keys a tile,
  as many scores as a full tile: one query against 32768 keys in one tile, not 128.
* [P6] The block map's kinds are read once with ``.tolist()`` (``flash_tiles.Tiles``): asking
  "EMPTY, FULL or PARTIAL?" is then a Python list lookup per tile instead of indexing a tensor (a dispatch
  and a conversion to a Python int per tile).
* [P7] Q-outer backward. FlashAttention-2 on a GPU runs key tiles in parallel and would need
  atomic adds for dQ. Here the outer loop is over query tiles: each query tile owns its dQ, which
  is complete once its key tiles are walked; dK and dV are summed over the query tiles one after
  the other on the one CPU thread that runs the loop, so no two writes ever race.
* [P8] Base-2 scores. The products are multiplied by scale * log2(e) instead of scale ([P1]), so each score s
  is the true one times log2(e), and exp(true score - m) = exp2(s - m'): the same number. On a CPU
  torch.exp2 runs about three times faster than torch.exp (it only shifts the exponent and
  evaluates a short polynomial): 0.15-0.19 ns against 0.45-0.65 ns per number here, which saves
  about a sixth of the dense forward's time at T = 2048. The running max m, the shift and the
  normaliser stay in these units inside the file; lse is handed out in natural units (times ln 2),
  and a float mask, a score modifier and ring attention's global lse are converted where they meet
  the scores. SAFE_LOGIT bounds the true scores, so the bounded path compares with
  SAFE_LOGIT * log2(e).
* [P9] On the bounded path every score is finite, so a partial tile's bool mask can be *added* as
  a tile of 0 and -inf (made once per call, ``flash_tiles.Tiles.additive``): a plain vectorised
  add, where ``masked_fill_`` with the negated, broadcast bool tile cost about 8x as much. (An infinite score
  plus -inf would be NaN, so the running-max path keeps the masked fill.)
* [P10] D = rowsum(dO * O) from forward's own output (``flash_backward.delta``), once per row.
  Summing it as rowsum(P * dP) instead costs a first pass over every key tile in the backward (the
  scores, exp2 and dP again: about a fifth of a causal forward + backward at T = 4096, by a profile).
  What that pass bought is exactness where the true gradient is zero: a row that sees one key has
  P = 1 there, and rowsum(P * dP) is that very dP, so dP - D cancels to 0; rowsum(dO * O) rounds
  differently and leaves about 1e-6. Such rows are known from the mask (``flash_tiles.Tiles.lone``:
  the widths of a query tile's FULL key tiles, plus the row sums of its PARTIAL ones), and their dS
  is set to 0: a fill in the query tiles that have them, not a pass per tile.
* [P11] Half-precision weights, FlashAttention's recipe for bfloat16 and float16 inputs, where the
  hardware multiplies half precision fast (``dtypes.matmul_dtype``; ``half_matmuls=`` forces it):
  each tile's weights P are rounded to the input dtype just before ``P V`` (a half-precision matmul
  whose product is added into the float32 accumulator), and in the backward P before ``P^T dO`` and
  dS before ``dS K`` and ``dS^T Q``. The scores, the running max and sum, dP = dO V^T, D and dS
  itself stay float32: a CPU has no half x half -> float32 matmul, and rounding the scores to half
  precision fails verify's large-logits cases (docs/flash.md). float16 never takes the bounded path
  [P2] (exp(40) passes its 65504; the running max keeps P <= 1), and a float16 product whose bound
  could pass 2^15 is computed in float32. On a CPU without AMX or AVX512-BF16 torch emulates half
  matmuls, many times slower than float32 ones: there everything stays float32.
* [P12] The built-in score modifiers fused (``mods.Closed``, ``flash_tiles.Keys.fused_mod``). Called as a
  function on every tile, soft-capping cost a multiply to natural units, three passes that each allocate a tile
  (divide, tanh, multiply), a multiply back and four index tensors; in the backward, autograd's graph and
  ``autograd.grad`` per tile. Fused: the cap is folded into the product's alpha (scale / cap), then one in-place
  tanh and one multiply by cap * log2(e); its derivative 1 - tanh^2 is kept in a third buffer on the backward's
  way and multiplies dS in place. A cap of at most SAFE_LOGIT bounds every score, so soft-capped tiles take the
  bounded path [P2] (no running max). ALiBi and T5's bias are one in-place add in base-2 units (ALiBi's
  slope x distance as one ``addcmul_``); their derivative in the score is 1, and a learnable slope's or table's
  gradient is one sum of dS per tile; a T5 block whose distances all fall into one bucket (every far block)
  adds one number per head. A modifier of the user's own, or ``mods.compose``, still runs as a function under
  autograd. The tanh (``online.tanh_``): expm1(2x) / (expm1(2x) + 2), exact near 0 where 2 sigmoid(2x) - 1 is
  not, in three passes: 0.54 ns an element against 1.38 for torch.tanh. The built-ins also ride on the key
  bands (:mod:`flash_band`, fused the same way: one add per head of a bias made once per batch of bands, once
  per call for a window). Measured by benchmarks/flash_mods.py (AMD EPYC, 2 threads, float32, T = 4096 and
  8192, causal and a window of 512; benchmarks/results/flash_mods-amd-epyc.txt): 0.35-0.87 of the function
  path's time, forward and forward + backward; against compiled flex with the same modifier, forward, 0.72-1.00
  for the soft-cap and T5's bias, 0.89-1.16 for ALiBi (flex has no CPU backward). Before the bands took them,
  ALiBi's and T5's window rows were 1.56-2.01 and 1.62-1.64 of flex (the ``-rerun`` file and git history).
  Each built-in says when it bounds the scores (``Closed.bounded``), so its tiles and bands take [P2]: a cap of
  at most SAFE_LOGIT; T5's bias when |q.k| scale + max|table| is within it; ALiBi with slopes >= 0 when the
  mask's closed form shows each row sees itself and nothing after (causal, a window: its *reach*).
* [P13] ALiBi's far keys dropped where their weights are exactly 0: :mod:`attnlab.kernels.flash_reach`.

Papers: Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness"
(2022); Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning"
(2023). The online softmax: Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018).
"""

from __future__ import annotations

import torch

from . import dropout, flash_band, flash_reach, mods, online, tuned, vmap_loop
from ._check import check, check_score_mod, empty_output
from .argcheck import fail, positive_int
from .dropout import NO_DROPOUT, Dropout
from .dtypes import half_product_fits, matmul_dtype
from .flash_backward import FlashBackward, no_batched_mod_params
from .flash_tiles import Keys, Tiles, buffer_view, dropout_keep
from .masks import PARTIAL, causal
from .mods import Mod
from .online import SAFE_LOGIT  # [P2]: the bounded rule (read here at each call)
from .tuned import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q  # [P5]: their home is the tile sizes' module

TILE_SCORES = DEFAULT_BLOCK_Q * DEFAULT_BLOCK_K  # [P5] fewer query rows than a tile: wider key tiles, as many scores
FEW_ROWS = 4  # [P2] query rows per key head below which the running max is cheaper than the keys' norms (decoding)
_CAUSAL = causal()  # one instance, so its compiled block maps are cached across calls


# ---- forward ------------------------------------------------------------------------------------------------


def forward_tiles(q5, k, v, scale, tiles: Tiles, drop: Dropout = NO_DROPOUT, mod: Mod | None = None,
                  keep_norm=False, half: torch.dtype | None = None):
    """Online-softmax forward. q5 (N, Hkv, G, L, E), k (N, Hkv, S, E), v (N, Hkv, S, Ev).

    Returns ``out`` (N, Hkv, G, L, Ev) and ``lse`` (N, Hkv, G, L, float64); rows with no visible key
    get out = 0 and lse = -inf. ``drop`` places this block in a larger problem for dropout (ring
    attention); a score modifier ``mod`` sees this block's own positions.
    ``keep_norm=True`` also returns ``(m, l)`` (N, Hkv, G, L) in the working dtype, each row's final
    shift and normaliser, so that backward can rebuild the weights exactly as forward divided them.
    ``half``: the inputs' half dtype, to multiply the weights by the values in it [P11] (None: float32).
    """
    N, Hkv, G, L, E = q5.shape
    S, Ev = k.shape[2], v.shape[3]
    out = q5.new_empty(N, Hkv, G, L, Ev)
    lse = q5.new_empty(N, Hkv, G, L, dtype=torch.float64)
    norm = (q5.new_empty(N, Hkv, G, L), q5.new_empty(N, Hkv, G, L)) if keep_norm else None
    f = dropout.factor(drop.p) if drop.active else 1.0  # [P11] |P V| <= block_k * max|v| * f (P <= 1)
    if half == torch.float16 and not half_product_fits(half, min(tiles.block_k, S) * f * float(v.abs().amax())):
        half = None
    keys = Keys.of(k, v, tiles, drop, mod, G, scale, half, q=q5)
    buf = q5.new_empty(N * Hkv * G * min(tiles.block_q, L) * min(tiles.block_k, S))  # [P3] one score tile
    hbuf = None if half is None else q5.new_empty(buf.numel(), dtype=half)  # [P3] [P11] the weights, rounded
    # (N, Hkv, 1): the longest key of each head; a few query rows take the running max instead, for which
    # the norms would be a pass over every key as long as the attention itself [P2]
    few = G * L < FEW_ROWS
    k_norm = None if few else k.norm(dim=-1).amax(dim=-1, keepdim=True)
    for qt, rows in tiles.query_tiles():
        # -- 1. this query tile (its query heads' rows together) --
        qi = q5[:, :, :, rows].reshape(N, Hkv, G * (rows.stop - rows.start), E)
        # -- 2. walk its key tiles: the bounded path when no score can leave [-SAFE_LOGIT, SAFE_LOGIT] --
        # (never in float16 weights [P11]: exp(40) would overflow its 65504; the running max keeps P <= 1)
        if not few and not tiles.has_bias and half != torch.float16 and (mod is None or keys.closed is not None) and \
                online.bounded(float((qi.norm(dim=-1) * k_norm).max()), scale, SAFE_LOGIT, keys.closed,
                               tiles.reach):  # [P2] [P12]
            run = _bounded_row_block(qi, keys, buf, hbuf, qt, rows)
        else:
            run = _online_row_block(qi, keys, buf, hbuf, qt, rows)
        # -- 3. normalise, and keep what backward needs (rows that saw no key: online.finish's rule) --
        o, lse_t, shift, l = online.finish(run.m, run.l, run.acc)
        _put(out[:, :, :, rows], o)
        _put(lse[:, :, :, rows], lse_t)
        if norm is not None:
            _put(norm[0][:, :, :, rows], shift)
            _put(norm[1][:, :, :, rows], l)
    if keep_norm:
        return out, lse, norm
    return out, lse


def _bounded_row_block(qi, keys: Keys, buf, hbuf, qt: int, rows: slice) -> online.Running:
    """[P2] One query tile's running numbers with shift 0: every score is within [-SAFE_LOGIT, SAFE_LOGIT]."""
    run, v3 = _start(qi, keys, shift=0.0)
    for cols, _, s, s3 in keys.walk(qi, buf, qt, rows, finite=True):  # -- 1. scores for each key tile (masked) --
        # -- 2. weights exp(score - 0), in place: no max, no rescale --
        s.exp2_()  # [P8]
        # -- 3. into the running sums --
        run.add(s3, v3[:, cols], _keep3(keys, s, s3, rows, cols), _half(hbuf, s3))
    return run


def _online_row_block(qi, keys: Keys, buf, hbuf, qt: int, rows: slice) -> online.Running:
    """One query tile's running numbers with the running max: what the online softmax is."""
    run, v3 = _start(qi, keys)
    for cols, kind, s, s3 in keys.walk(qi, buf, qt, rows):  # -- 1. scores for each key tile (modified, masked) --
        # -- 2. the weights exp(score - m_new) in place; what was gathered rescaled to the new max --
        # a masked tile, or a modifier's -inf: a row may have seen nothing yet (a built-in's scores are finite)
        run.rescale(s3, may_see_nothing=kind == PARTIAL or (keys.mod is not None and keys.closed is None))
        # -- 3. into the running sums --
        run.add(s3, v3[:, cols], _keep3(keys, s, s3, rows, cols), _half(hbuf, s3))
    return run


def _start(qi, keys: Keys, shift: float = float("-inf")):
    """The running numbers of query tile qi (N, Hkv, G*r, E), nothing seen yet: m, l (N*Hkv, G*r) and
    acc (N*Hkv, G*r, Ev); and v seen as (N*Hkv, S, Ev), in the weights' matmul dtype [P11]."""
    N, Hkv, R, _ = qi.shape
    v = keys.v if keys.vh is None else keys.vh
    v3 = v.reshape(N * Hkv, *v.shape[2:])
    return online.Running.start(qi, N * Hkv, R, v3.shape[-1], shift), v3


def _half(hbuf, s3):
    """[P11] The reused half buffer in the shape of the tile's weights s3, or None on the float32 path."""
    return None if hbuf is None else buffer_view(hbuf, tuple(s3.shape))


def _keep3(keys: Keys, s, s3, rows: slice, cols: slice):
    """The tile's dropout keep-mask in s3's (N*Hkv, G*r, c) shape, or None without dropout."""
    return dropout_keep(keys.drop, s, keys.G, rows, cols).view(s3.shape) if keys.drop.active else None


def _put(dst: torch.Tensor, x: torch.Tensor) -> None:
    """Copy a query tile's (N*Hkv, G*r, ...) numbers into its (N, Hkv, G, r, ...) slice of a result."""
    dst.copy_(x.view(dst.shape))


# ---- the autograd Function ----------------------------------------------------------------------------------


class Flash(torch.autograd.Function):
    """The forward (tiles or bands) under autograd; its backward is :class:`FlashBackward`, a Function of its own,
    so that the backward pass can itself be vmapped (gradcheck's batched check, ``torch.func.jacrev``): both
    use :func:`attnlab.kernels.vmap_loop.loop` as their vmap rule. No double backward: the matrix form has one.

    (q5, k, v, bias, tiles, scale, drop, half, mod, *mod_params) -> (out, m, l); only out is differentiable.
    ``half``: the inputs' half dtype for the weight matmuls [P11], or None (float32)."""

    @staticmethod
    def forward(q5, k, v, bias, tiles, scale, drop, half, mod=None, *mod_params):
        if tiles.band is not None and not drop.active and (mod is None or mod.closed is not None):
            out, _, (m, l) = flash_band.forward(q5, k, v, scale, tiles.band, SAFE_LOGIT, half,
                                                mod.closed if mod is not None else None)
        else:
            out, _, (m, l) = forward_tiles(q5, k, v, scale, tiles, drop, mod, keep_norm=True, half=half)
        return out, m, l

    @staticmethod
    def setup_context(ctx, inputs, output):
        q5, k, v, bias, tiles, scale, drop, half, mod, *mod_params = inputs
        out, m, l = output
        ctx.mark_non_differentiable(m, l)
        ctx.save_for_backward(q5, k, v, bias, m, l, out)  # out: D = rowsum(dO * O) [P10]
        ctx.cfg = (tiles, scale, drop, mod, half)
        ctx.mod_params = tuple(mod_params)  # the modifier reads these itself; kept here for the chain rule

    @staticmethod
    def backward(ctx, dout, _dm, _dl):
        q5, k, v, bias, m, l, out = ctx.saved_tensors
        wants = (bias is not None and ctx.needs_input_grad[3],
                 *(ctx.needs_input_grad[9 + i] for i in range(len(ctx.mod_params))))
        rest = (q5, k, v, bias, m, l, out, ctx.cfg, wants, *ctx.mod_params)
        grads = vmap_loop.legacy(FlashBackward, dout, *rest) or FlashBackward.apply(dout, *rest)
        return (*grads[:4], None, None, None, None, None, *grads[4:])

    @staticmethod
    def vmap(info, in_dims, *args):
        no_batched_mod_params(in_dims[9:])
        return vmap_loop.loop(Flash, info, in_dims, *args)


# ---- the form -----------------------------------------------------------------------------------------------


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, block_q: int | None = None, block_k: int | None = None,
              score_mod=None, bands: bool = True, half_matmuls: bool | None = None, split_heads: bool = True):
    """The flash form. ``block_q`` / ``block_k``: tile sizes (any L, S; tiles need not divide them); None takes
    the sizes ``attnlab tune`` measured for this processor (:mod:`attnlab.kernels.tuned`), else 256 x 256 [P5].

    ``bands``: with a sparse mask function (a sliding window, documents), run the forward as one
    contiguous key band per query tile (:mod:`attnlab.kernels.flash_band`); False walks the tiles.

    ``score_mod(score, b, h, q_idx, kv_idx)`` (:mod:`attnlab.mods`) changes each tile's scaled scores
    before the mask; gradients reach q, k, v and the tensors the modifier holds.

    ``half_matmuls`` (bfloat16 and float16 inputs; nothing changes for others): multiply the weights in
    the input's dtype, FlashAttention's recipe [P11] -- P rounded before P V, dS before dS K and dS^T Q,
    the scores, statistics and accumulators in float32. None (the default) does so where the hardware
    multiplies half precision fast (``dtypes.matmul_dtype``: a GPU, a CPU with AMX or AVX512-BF16);
    True forces it, False keeps everything in float32. A float16 product that could pass 65504 is
    computed in float32 whatever it says.

    ``split_heads``: ALiBi under the causal mask runs each head only over the keys whose weights do not underflow
    to exactly 0 [P13] (with ``bands``); False runs every head over every key.
    """
    a = check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    mod = check_score_mod(score_mod)
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if b is not None:
            positive_int(name, b, "a positive integer tile size")
    sizes = tuned.current()  # [P5] what this processor measured, where it measured anything
    tq, tk = sizes.tiles(a.L)
    block_q = block_q or tq or DEFAULT_BLOCK_Q
    if block_k is None and tk is None and block_q > a.L:  # [P5] decoding: one query, S keys, in a few wide tiles
        block_k = max(DEFAULT_BLOCK_K, TILE_SCORES // max(a.L, 1) // 64 * 64)
    block_k = block_k or tk or DEFAULT_BLOCK_K
    if half_matmuls is not None and not isinstance(half_matmuls, bool):
        raise fail("half_matmuls", half_matmuls, "True, False or None")
    if a.trivial:  # an empty dim: nothing to attend to
        return a.unflatten(empty_output(a))
    work = a.work
    mm = matmul_dtype(a.q.dtype, a.q.device, half_matmuls)  # [P11]
    half = mm if mm != work else None
    parts = flash_reach.alibi_heads(a, mod, work, half) if bands and split_heads else None  # [P13]
    if parts is not None:
        kw = dict(scale=a.scale, enable_gqa=True, block_q=block_q, block_k=block_k, bands=bands,
                  half_matmuls=half_matmuls, split_heads=False)
        G, slopes = a.groups, mod.closed.slopes
        outs = [attention(a.q[:, h0 * G:h1 * G], a.k[:, h0:h1], a.v[:, h0:h1], is_causal=w is None,
                          attn_mask=flash_reach.window(w) if w is not None else None,
                          score_mod=mods.alibi(slopes=slopes[h0 * G:h1 * G]), **kw) for h0, h1, w in parts]
        return a.unflatten(torch.cat(outs, dim=1))
    q5 = a.q.to(work).reshape(a.N, a.Hkv, a.groups, a.L, a.E)  # query heads grouped by their key head
    k, v = a.k.to(work).contiguous(), a.v.to(work).contiguous()
    mask_fn = _CAUSAL if a.is_causal else a.mask
    bias = a.attn_mask.to(work) if a.attn_mask is not None and a.attn_mask.dtype != torch.bool else None
    dense = a.attn_mask if bias is None else bias
    skip = dense is None or bool(torch.isfinite(v).all())  # hidden NaN values must still reach the output
    tiles = Tiles(a.N, a.H, a.L, a.S, min(block_q, a.L), min(block_k, a.S), mask_fn, dense, a.q.device, skip)
    tiles.reach = flash_reach.reach(mask_fn, a.L, a.S) if dense is None else None  # ALiBi's bounds [P12]
    if bands and mask_fn is not None and dense is None and (mod is None or mod.closed is not None) and \
            a.dropout_p == 0:  # (a built-in modifier rides along on the bands [P12]; a function walks the tiles)
        band = flash_band.plan(mask_fn, a.N, a.H, a.L, a.S, sizes.band_rows or flash_band.BAND_BLOCK_Q, a.q.device,
                               sizes.band_batch)
        if band is not None and band.scores <= flash_band.SHARE_OF_TILES * tiles.scores():
            tiles.band = band  # documents aligned to the tiles: the tile walk has no waste to save
    drop = Dropout(dropout.draw_seed(), a.dropout_p) if a.dropout_p > 0 else NO_DROPOUT
    # the modifier's tensors: those it lists, and any it reads that need gradients without listing them
    # (a built-in's closed form lists its one tensor: its function is not called to look [P12])
    params = (*mod.params, *(mods.unlisted(mod, a.N, a.H, work, a.q.device) if mod.closed is None else ())) \
        if mod is not None else ()
    out5, _, _ = Flash.apply(q5, k, v, bias, tiles, a.scale, drop, half, mod, *params)  # (N, Hkv, G, L, Ev)
    return a.unflatten(out5.reshape(a.N, a.H, a.L, a.Ev).to(a.q.dtype))


