"""Flash attention in plain PyTorch: tiled online softmax with O(L) memory and its own backward.

Read this first: :mod:`attnlab.explore.online_softmax` (``attnlab explore online-softmax``)
runs the same online softmax on ONE query row, one key tile at a time, and records every number.
This file is that loop for every row at once (:func:`attend`, the form's one inner loop) and the form
around it: :func:`attention` makes a plan (:func:`plan`, :mod:`attnlab.kernels.flash_plan`: every fast
path chosen once, printable) and runs it. A tile's three steps are :mod:`attnlab.kernels.flash_tiles`,
the backward pass's loop :mod:`attnlab.kernels.flash_backward`, and the tricks that make them fast are
tagged [P1] .. [P13] below.

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

A score modifier (:mod:`attnlab.mods`) is applied to each tile's scores before the mask (FlexAttention's
order: a hidden score is -inf whatever the modifier makes of it). The backward pass applies the chain rule
inside the tile: it recomputes the tile's raw scores, runs the modifier under autograd, and pulls dS back
through it to the raw scores and to any tensor the modifier holds (a bias table, ALiBi slopes; listed in its
``params`` or not: :func:`attnlab.kernels.mods.unlisted` finds the others) -- one tile at a time, never L x S. A
modifier that hides every key of a row (-inf) leaves it all zeros, as a mask does; one that changes its input
in place gets a copy there. The built-ins are fused instead [P12].

Attention sinks (gpt-oss, ``sinks=``): each head's sink logit is one more score of every row, with no value.
The forward folds it into each row's running numbers once, after the row's last key tile
(:func:`attnlab.kernels.online.add_sink`), so the saved shift and normaliser are the whole row's, sink included:
the backward rebuilds the keys' weights from them unchanged, and the sink's gradient is per row, from numbers it
already has -- dsink_h = -sum over the rows of head h of P_sink * D, with P_sink = exp2(sink - shift) / norm and
D = rowsum(dO * O) [P10] -- never a pass over the scores (:meth:`attnlab.kernels.flash_backward.Weights.sink_grad`).
With a sink no row's gradient is zero for seeing one key, so [P10]'s exact zeros are off.

Shapes. The query heads of a group are extra rows: ``q`` (N, Hkv, G, L, E) is read one query tile
of r rows at a time as ``qi`` (N, Hkv, G*r, E). In the forward loop the running numbers of those
rows are ``m`` and ``l`` (N*Hkv, G*r) and ``acc`` (N*Hkv, G*r, Ev): one batch dimension, so that
``acc += weights @ v`` is one batched matmul into ``acc`` itself.

Performance notes -- each trick is tagged [P1] .. [P13] at its line:

* [P1] The scale is applied by the matmul itself: ``baddbmm(..., beta=0, alpha=scale)`` multiplies
  each finished dot product, for free, instead of a pass over every tile of scores. (Folding it into
  q first, ``q * scale``, is free too, but rounds every element of q before the sum: with large
  logits that tripled the float32 error against PyTorch's; see docs/flash.md.) dK's ``scale`` rides
  on its matmul the same way.
* [P2] The bounded path. For any query row and key, |q.k| <= |q| |k| <= max|q| * max|k| over the
  query tile and the head's keys. When that bound is at most SAFE_LOGIT (40), no score can leave
  [-40, 40], so exp(score) neither overflows nor underflows float32 (about e^-87 .. e^88): the
  running max is not needed and the shift stays 0. Each tile then skips the max, the rescale of
  ``l`` and ``acc`` and the -inf guard (``online.Running.weigh`` with its shift fixed); every other
  query tile takes the running max. The plan chooses the rule once (``flash_plan.Bounded``); the forward
  asks it per query tile. A float mask or a modifier called as a function can move scores anywhere,
  so it always takes the running max, and so do fewer than ``flash_plan.FEW_ROWS`` query rows per key
  head (decoding), where the keys' norms would cost as much as the attention.
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
  query block shorter than a tile (decoding: one query, S keys) takes ``flash_plan.TILE_SCORES // L``
  keys a tile, as many scores as a full tile: one query against 32768 keys in one tile, not 128.
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
* [P12] The built-in score modifiers fused (the ``mods.Fused`` classes: ``SoftCap``, ``ALiBi``, ``T5Bias``). Called as a
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
  Each built-in says when it bounds the scores (its ``bounded``), so its tiles and bands take [P2]: a cap of
  at most SAFE_LOGIT; T5's bias when |q.k| scale + max|table| is within it; ALiBi with slopes >= 0 when the
  mask's closed form shows each row sees itself and nothing after (causal, a window: its *reach*).
* [P13] ALiBi's far keys dropped where their weights are exactly 0: :mod:`attnlab.kernels.flash_reach`.

Papers: Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness"
(2022); Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning"
(2023). The online softmax: Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018).
"""

from __future__ import annotations

import torch

from . import dropout, flash_band, flash_plan, flash_reach, mods, online, vmap_loop
from ._check import check, check_score_mod, empty_output
from .dropout import NO_DROPOUT, Dropout
from .dtypes import half_product_fits
from .flash_backward import FlashBackward, no_batched_mod_params
from .flash_plan import Bounded, Plan
from .flash_tiles import Buffers, Keys, Tiles
from .masks import PARTIAL
from .mods import Mod
from .online import LOG2E
from .tuned import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q  # [P5]: their home is the tile sizes' module

__all__ = ["DEFAULT_BLOCK_K", "DEFAULT_BLOCK_Q", "Flash", "Tiles", "attend", "attention", "forward_tiles", "plan"]


# ---- the form -----------------------------------------------------------------------------------------------


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, block_q: int | None = None, block_k: int | None = None,
              score_mod=None, bands: bool = True, half_matmuls: bool | None = None, split_heads: bool = True,
              sinks=None):
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

    ``sinks`` (H,): gpt-oss's attention sinks, one logit per query head joined to each row's softmax (see the
    module docstring); their gradient comes from the backward's per-row numbers.

    What it will do with these arguments, without doing it: ``print(plan(...))`` with the same arguments.
    """
    return run(plan(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, block_q=block_q,
                    block_k=block_k, score_mod=score_mod, bands=bands, half_matmuls=half_matmuls,
                    split_heads=split_heads, sinks=sinks))


def plan(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
         block_q: int | None = None, block_k: int | None = None, score_mod=None, bands: bool = True,
         half_matmuls: bool | None = None, split_heads: bool = True, sinks=None) -> Plan:
    """The :class:`attnlab.kernels.flash_plan.Plan` :func:`attention` makes of these arguments: its path, tile
    sizes, shift, modifier and weights, chosen once. ``print`` it to read them; nothing is computed."""
    args = check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, sinks=sinks)
    return flash_plan.make(args, check_score_mod(score_mod), block_q, block_k, bands, half_matmuls, split_heads)


def run(p: Plan) -> torch.Tensor:
    """Carry out a plan: nothing for an empty dim, the heads' runs [P13], or the autograd Function below."""
    args = p.args
    if p.path == flash_plan.NOTHING:
        return args.unflatten(empty_output(args))
    if p.path == flash_plan.SPLIT:
        return _split_heads(p)
    work = args.work
    q = args.q.to(work).reshape(args.N, args.Hkv, args.groups, args.L, args.E)  # query heads grouped by key head
    k, v = args.k.to(work).contiguous(), args.v.to(work).contiguous()
    bias = p.tiles.dense if p.tiles.has_bias else None  # a float mask in the work dtype: its gradient is dbias
    drop = Dropout(dropout.draw_seed(), args.dropout_p) if args.dropout_p > 0 else NO_DROPOUT
    # the modifier's tensors: those it lists, and any it reads that need gradients without listing them
    # (a fused one lists its one tensor: its function is not called to look [P12])
    mod = p.mod
    params = () if mod is None else (*mod.params, *(mods.unlisted(mod, args.N, args.H, work, args.q.device)
                                                    if p.fused is None else ()))
    sinks = args.sinks.to(work) if args.sinks is not None else None  # as gpt-oss: in the scores' dtype
    out, _, _ = Flash.apply(q, k, v, bias, sinks, p, drop, *params)  # (N, Hkv, G, L, Ev)
    return args.unflatten(out.reshape(args.N, args.H, args.L, args.Ev).to(args.q.dtype))


def _split_heads(p: Plan) -> torch.Tensor:
    """[P13] ALiBi's runs of key heads, each a call of its own: over a window where every farther weight is 0."""
    args, G = p.args, p.args.groups
    kw = dict(scale=args.scale, enable_gqa=True, block_q=p.block_q, block_k=p.block_k, bands=True,
              half_matmuls=p.half is not None, split_heads=False)
    slopes, sinks = p.mod.slopes, args.sinks
    outs = [attention(args.q[:, h0 * G:h1 * G], args.k[:, h0:h1], args.v[:, h0:h1], is_causal=w is None,
                      attn_mask=flash_reach.window(w) if w is not None else None,
                      score_mod=mods.alibi(slopes=slopes[h0 * G:h1 * G]),
                      sinks=None if sinks is None else sinks[h0 * G:h1 * G], **kw) for h0, h1, w in p.heads]
    return args.unflatten(torch.cat(outs, dim=1))


# ---- the autograd Function ----------------------------------------------------------------------------------


class Flash(torch.autograd.Function):
    """The forward (tiles or bands, as the plan says) under autograd; its backward is :class:`FlashBackward`, a
    Function of its own, so that the backward pass can itself be vmapped (gradcheck's batched check,
    ``torch.func.jacrev``): both use :func:`attnlab.kernels.vmap_loop.loop` as their vmap rule. No double
    backward: the matrix form has one.

    (q, k, v, bias, sinks, plan, drop, *mod_params) -> (out, m, l); only out is differentiable. ``sinks``: (H,) in
    the working dtype, or None."""

    @staticmethod
    def forward(q, k, v, bias, sinks, p: Plan, drop, *mod_params):
        if p.bands is not None:
            out, _, (m, l) = flash_band.forward(q, k, v, p.args.scale, p.bands, p.half, p.fused, p.bounded, sinks)
        else:
            out, _, (m, l) = forward_tiles(q, k, v, p.args.scale, p.tiles, drop, p.mod, keep_norm=True, half=p.half,
                                           bounded=p.bounded, sinks=sinks)
        return out, m, l

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, bias, sinks, p, drop, *mod_params = inputs
        out, m, l = output
        ctx.mark_non_differentiable(m, l)
        ctx.save_for_backward(q, k, v, bias, sinks, m, l, out)  # out: D = rowsum(dO * O) [P10]
        ctx.cfg = (p.tiles, p.args.scale, drop, p.mod, p.half)
        ctx.mod_params = tuple(mod_params)  # the modifier reads these itself; kept here for the chain rule

    @staticmethod
    def backward(ctx, dout, _dm, _dl):
        q, k, v, bias, sinks, m, l, out = ctx.saved_tensors
        wants = (bias is not None and ctx.needs_input_grad[3], sinks is not None and ctx.needs_input_grad[4],
                 *(ctx.needs_input_grad[7 + i] for i in range(len(ctx.mod_params))))
        rest = (q, k, v, bias, sinks, m, l, out, ctx.cfg, wants, *ctx.mod_params)
        grads = vmap_loop.legacy(FlashBackward, dout, *rest) or FlashBackward.apply(dout, *rest)
        return (*grads[:5], None, None, *grads[5:])

    @staticmethod
    def vmap(info, in_dims, *args):
        no_batched_mod_params(in_dims[7:])
        return vmap_loop.loop(Flash, info, in_dims, *args)


# ---- the forward --------------------------------------------------------------------------------------------


def forward_tiles(q, k, v, scale, tiles: Tiles, drop: Dropout = NO_DROPOUT, mod: Mod | None = None,
                  keep_norm=False, half: torch.dtype | None = None, bounded: Bounded | None = None,
                  sinks: torch.Tensor | None = None):
    """Online-softmax forward over the tiles. q (N, Hkv, G, L, E), k (N, Hkv, S, E), v (N, Hkv, S, Ev).

    Returns ``out`` (N, Hkv, G, L, Ev) and ``lse`` (N, Hkv, G, L, float64); rows with no visible key
    get out = 0 and lse = -inf. ``drop`` places this block in a larger problem for dropout (ring
    attention); a score modifier ``mod`` sees this block's own positions. ``bounded``: the plan's rule for
    skipping the running max [P2] (None: every tile keeps it).
    ``keep_norm=True`` also returns ``(m, l)`` (N, Hkv, G, L) in the working dtype, each row's final
    shift and normaliser, so that backward can rebuild the weights exactly as forward divided them.
    ``half``: the inputs' half dtype, to multiply the weights by the values in it [P11] (None: float32).
    ``sinks``: (H,) sink logits in q's dtype, query head h = hk * G + g, folded into each row after its last key
    tile (:func:`attnlab.kernels.online.add_sink`): lse, m and l are then the whole row's, sink included, and a row
    that sees no key gets out = 0 and lse = its sink.
    """
    N, Hkv, G, L, E = q.shape
    S, Ev = k.shape[2], v.shape[3]
    out = q.new_empty(N, Hkv, G, L, Ev)
    lse = q.new_empty(N, Hkv, G, L, dtype=torch.float64)
    norm = (q.new_empty(N, Hkv, G, L), q.new_empty(N, Hkv, G, L)) if keep_norm else None
    f = dropout.factor(drop.p) if drop.active else 1.0  # [P11] |P V| <= block_k * max|v| * f (P <= 1)
    if half == torch.float16 and not half_product_fits(half, min(tiles.block_k, S) * f * float(v.abs().amax())):
        half = None
    if half == torch.float16:  # [P11] float16 weights keep the running max: exp(40) would pass 65504, P <= 1 does not
        bounded = None
    keys = Keys.of(q, k, tiles, drop, mod, scale)
    v_mm = (v if half is None else v.to(half)).reshape(N * Hkv, S, Ev)  # the values as P V multiplies them [P11]
    n = N * Hkv * G * min(tiles.block_q, L) * min(tiles.block_k, S)  # [P3] one tile of scores
    bufs = Buffers.of(q, n, keys.score.fused is not None and keys.score.fused.scratch, half)
    k_norms = online.key_norms(k) if bounded is not None else None  # [P2] (N, Hkv, 1): each head's longest key
    sink2 = None if sinks is None else (sinks * LOG2E).view(1, Hkv, G, 1)  # [P8] base-2 units, per query head
    for qt, rows in tiles.query_tiles():
        qi = q[:, :, :, rows].reshape(N, Hkv, G * (rows.stop - rows.start), E)  # its query heads' rows together
        fixed = bounded is not None and bounded.holds(qi, k_norms)  # [P2] shift 0: no running max
        run = attend(qi, qt, rows, keys, v_mm, bufs, online.Running.start(qi, N * Hkv, qi.shape[2], Ev, fixed))
        m, l, acc = run.m, run.l, run.acc
        if sink2 is not None:  # the sink: one more score of each row, after its last key tile
            m, l, acc = _with_sink(m, l, acc, sink2, N, Hkv, G)
        o, lse_t, shift, l = online.finish(m, l, acc)  # rows that saw no key: online.finish's rule
        _put(out[:, :, :, rows], o)
        _put(lse[:, :, :, rows], lse_t)
        if norm is not None:
            _put(norm[0][:, :, :, rows], shift)
            _put(norm[1][:, :, :, rows], l)
    return (out, lse, norm) if keep_norm else (out, lse)


def attend(qi, qt: int, rows: slice, keys: Keys, v: torch.Tensor, bufs: Buffers,
           run: online.Running) -> online.Running:
    """THE LOOP: one query tile qi (N, Hkv, G*r, E) against its key tiles, gathered into ``run`` (online.Running:
    m, l (N*Hkv, G*r), acc (N*Hkv, G*r, Ev)). ``v`` (N*Hkv, S, Ev) in the weights' matmul dtype [P11].

    The shape of Triton's tutorial loop (06-fused-attention): load a key tile, score, modify, mask, update the
    running max and sum, accumulate. The modifier comes before the mask, as in FlexAttention: a hidden score is
    -inf whatever the modifier makes of it. Every choice was made before the loop: which key tiles (the plan's
    tiles), how the scores are made (``keys.score``), whether the shift is fixed at 0 (``run.fixed``, [P2])."""
    N, Hkv, R, _ = qi.shape
    for kt, cols, kind in keys.tiles.key_tiles(qt, rows):  # -- 1. load a key tile: EMPTY ones are skipped [P6] --
        s = keys.product(qi, bufs.scores, cols)  # -- 2. score: alpha q k^T, (N, Hkv, G*r, c) [P1] [P3] [P8] --
        s = keys.modify(s, rows, cols, bufs)  # -- 3. modify: a built-in fused, a function called [P12] --
        if kind == PARTIAL:  # -- 4. mask: -inf where hidden (one add when the scores are finite [P9]) --
            keys.tiles.mask(s, qt, kt, rows, cols, keys.score.G, finite=run.fixed)
        # -- 5. the running max and sum: the weights exp2(s - m) in place, what was gathered rescaled [P2] [P8] --
        p = s.view(N * Hkv, R, -1)  # the same memory with one batch dim; a masked tile, or a function's -inf,
        run.weigh(p, may_see_nothing=kind == PARTIAL or keys.score.hides)  # may leave a row nothing to see yet
        # -- 6. accumulate: l += rowsum(p), acc += p v, dropped where dropout says [P11] --
        run.add(p, v[:, cols], keys.keep(s, rows, cols), bufs.like(bufs.half, p))
    return run


def _with_sink(m, l, acc, sink2, N: int, Hkv: int, G: int):
    """A query tile's running numbers m, l (N*Hkv, G*r) and acc (N*Hkv, G*r, Ev) with each row's sink folded in
    (:func:`attnlab.kernels.online.add_sink`); ``sink2`` (1, Hkv, G, 1) in base-2 units, rows g*r + i."""
    B, R, Ev = acc.shape
    m, l, acc = online.add_sink(m.reshape(N, Hkv, G, -1), l.reshape(N, Hkv, G, -1), acc.view(N, Hkv, G, -1, Ev), sink2)
    return m.reshape(B, R), l.reshape(B, R), acc.view(B, R, Ev)


def _put(dst: torch.Tensor, x: torch.Tensor) -> None:
    """Copy a query tile's (N*Hkv, G*r, ...) numbers into its (N, Hkv, G, r, ...) slice of a result."""
    dst.copy_(x.view(dst.shape))
