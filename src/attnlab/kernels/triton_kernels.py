"""FlashAttention-2 as Triton kernels: the flash form's loop, one program per query tile on a GPU.

The plain-PyTorch flash form (:mod:`attnlab.kernels.flash`) walks the key tiles in a Python loop
and keeps, for every query row, three running numbers: ``m`` (the running max), ``l`` (the running
normaliser) and ``acc`` (the unnormalised output). These kernels do the same, with one Triton
program per (query tile, batch x head), so thousands of tiles run at once:

* ``_fwd``       -- the online softmax over key tiles; writes the output and, per row, the shift and 1 / norm.
* ``_bwd_pre``   -- the pre-pass ``D = rowsum(dO * O)``.
* ``_bwd_dkdv``  -- one program per key tile: ``dV += P^T dO`` and ``dK += dS^T Q`` over the query tiles
  (and over the query heads of a GQA group), so no two programs write the same dK / dV: no atomics.
* ``_bwd_dq``    -- one program per query tile: ``dQ += dS K`` over the key tiles.

Scores live in base 2 (``exp2`` is the GPU's native exponential): ``s = q.k * scale * log2(e)``.
The online softmax and what each row saves for the backward follow :mod:`attnlab.kernels.online`
(its :func:`~attnlab.kernels.online.finish`): the shift m and the normaliser l, the latter saved as
1 / l so that the backward multiplies; a row that sees no key writes 0 and saves (+inf, 1), so that
P = exp2(s - inf) * 1 = 0 whatever its scores. Attention sinks (gpt-oss): ``_fwd`` folds each row's sink into
m and l after its last key tile (:func:`attnlab.kernels.online.add_sink`), so the saved m and 1 / l are the
whole row's and the backward kernels rebuild the keys' weights unchanged; the sinks' gradient is a per-row sum
the host takes from m, 1 / l and D (:mod:`attnlab.kernels.flash_triton`). Tiles are skipped, computed whole, or masked
elementwise by :func:`_tile_range` / :func:`_needs_mask` / :func:`_visible`, from the mask's rule
(causal with an offset, sliding window, prefix, document ids), a stored block map, or a dense mask.

Written against Triton 3.6's language (plain pointers, no tensor descriptors), so the same file runs
on the GPU machine's Triton 3.6 and under Triton 3.8's CPU interpreter (``TRITON_INTERPRET=1``).
This module imports Triton; :mod:`attnlab.kernels.flash_triton` imports it only when the form runs.

Papers: Dao, "FlashAttention-2" (2023); Triton's fused-attention tutorial (06-fused-attention.py).
"""

import triton
import triton.language as tl

from .interpreter import interpreting
from .online import LOG2E
from .triton_masks import BITS, FIELDS

_LOG2E = tl.constexpr(LOG2E)  # a float mask's values join the base-2 scores times log2(e)
# where each number of the mask table's header sits (triton_masks.FIELDS, in that order)
(_OFF, _WINDOW, _PREFIX, _DOC_SB, _DOC_AT, _RANGE_SB, _RANGE_AT, _LIST_AT, _PIDX_AT, _COUNT_AT, _N_LIST, _PACK_ST,
 _PACK_SN, _PACK_SH, _MASK_SB, _MASK_SH, _MASK_SL, _MASK_SS) = (tl.constexpr(i) for i in range(len(FIELDS)))
# the bits of MASKS (triton_masks.BITS), each tested as ``if CAUSAL & MASKS`` (the constexpr first)
CAUSAL, WINDOW, PREFIX, DOCS, TILES, DENSE_BOOL, DENSE_FLOAT = (
    tl.constexpr(BITS[n]) for n in ("CAUSAL", "WINDOW", "PREFIX", "DOCS", "TILES", "DENSE_BOOL", "DENSE_FLOAT"))
ELEMENTWISE = tl.constexpr(BITS["DOCS"] | BITS["DENSE_BOOL"] | BITS["DENSE_FLOAT"])  # masked in every tile
INTERPRETED = interpreting()  # Triton decides when a kernel is defined, i.e. now: interpreter or GPU


def _autotune(key):
    """A small autotune list for Hopper (H100 / H200): the block sizes are fixed by the host (a block
    map is built per block size), so only warps and pipeline stages are tuned -- 4 or 8 warps (the
    bigger tiles of head dim 128 want 8), 2 to 4 stages (Hopper's shared memory holds 3-4 stages of
    a 128 x 64 bf16 tile pair). The interpreter runs the first config only: it has no clock to tune."""
    if INTERPRETED:
        return lambda fn: fn
    configs = [triton.Config({}, num_warps=w, num_stages=s) for w, s in ((4, 2), (4, 3), (8, 3), (8, 4))]
    return triton.autotune(configs=configs, key=key)


@triton.jit
def _dot(a, b, DOT_PREC: tl.constexpr):
    """a @ b accumulated in float32. "upcast" (the interpreter, half types): operands cast to float32
    first -- the interpreter's dot misreads bfloat16 (Triton 3.8), and a tensor core's products of
    half-precision numbers are exact in float32 anyway."""
    if DOT_PREC == "upcast":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b, input_precision=DOT_PREC)


@triton.jit
def _operand(x, dtype, DOT_PREC: tl.constexpr):
    """Weights (P, dS) as a dot operand: rounded to the inputs' dtype for the tensor cores, as
    FlashAttention does; kept in float32 where the dot runs in float32 anyway (the interpreter)."""
    if DOT_PREC == "upcast":
        return x
    else:
        return x.to(dtype)


# ---- the mask: one table (triton_masks.FIELDS), the mask tensor, the stored tiles; MASKS says what is used ----


@triton.jit
def _mask_state(MT, MASK, PACK):
    """What every mask helper reads, read once per program: the rule's integers (off, window, prefix; see
    :class:`attnlab.kernels.masks.Rule`) and the three pointers."""
    off = tl.load(MT + _OFF).to(tl.int32)
    window = tl.load(MT + _WINDOW).to(tl.int32)
    prefix = tl.load(MT + _PREFIX).to(tl.int32)
    return off, window, prefix, MT, MASK, PACK


@triton.jit
def _tile_range(row0, row1, n_other, mask, r_at, MASKS: tl.constexpr, TRANSPOSE: tl.constexpr):
    """The span [lo, hi) of the other axis that rows row0..row1-1 can see (keys for a query tile,
    queries for a key tile when TRANSPOSE): everything outside it is EMPTY and never visited."""
    off, window, prefix, MT, _, _ = mask
    lo = row0 * 0
    hi = lo + n_other
    if TRANSPOSE:  # rows are keys j, the span is queries i; visible: j <= i + off and j > i + off - window
        if CAUSAL & MASKS:
            lo = tl.maximum(row0 - off, 0)
            if PREFIX & MASKS:
                lo = tl.where(row0 < prefix, 0, lo)
        if WINDOW & MASKS:
            hi = tl.minimum(row1 - 1 - off + window, n_other)
    else:  # rows are queries i, the span is keys j
        if CAUSAL & MASKS:
            hi = tl.minimum(tl.maximum(row1 + off, 0), n_other)
            if PREFIX & MASKS:
                hi = tl.maximum(hi, tl.minimum(prefix, n_other))
        if WINDOW & MASKS:
            lo = tl.maximum(row0 + off - window + 1, 0)
    if DOCS & MASKS:  # the tile's range from the mask function (Mask.spans): the keys its documents hold
        lo = tl.maximum(lo, tl.load(MT + r_at).to(tl.int32))
        hi = tl.minimum(hi, tl.load(MT + r_at + 1).to(tl.int32))
    return lo, hi


@triton.jit
def _span(row0, pid, b, n_other, mask, MASKS: tl.constexpr, TRANSPOSE: tl.constexpr, BLOCK_ROWS: tl.constexpr,
          BLOCK_OTHER: tl.constexpr):
    """The loop bounds [t_lo, t_hi) over the other axis' tiles for row tile ``pid``: a span of tiles from
    the mask's rule, or (a block map) an index into the row's list of non-EMPTY tiles."""
    MT = mask[3]
    r_at = tl.load(MT + _RANGE_AT) + b * tl.load(MT + _RANGE_SB) + pid * 2
    lo, hi = _tile_range(row0, row0 + BLOCK_ROWS, n_other, mask, r_at, MASKS, TRANSPOSE)
    t_lo = lo // BLOCK_OTHER
    t_hi = tl.cdiv(hi, BLOCK_OTHER)
    if TILES & MASKS:
        t_lo = 0
        t_hi = tl.load(MT + tl.load(MT + _COUNT_AT) + pid).to(tl.int32)
    return t_lo, t_hi


@triton.jit
def _tile_at(t, pid, mask, MASKS: tl.constexpr):
    """Step t of row tile ``pid``'s loop: the tile of the other axis it computes, and (a block map) the index
    of that tile's stored mask, -1 for a FULL one."""
    other = t
    pidx = -1
    if TILES & MASKS:
        MT = mask[3]
        at = pid * tl.load(MT + _N_LIST) + t
        other = tl.load(MT + tl.load(MT + _LIST_AT) + at).to(tl.int32)
        pidx = tl.load(MT + tl.load(MT + _PIDX_AT) + at).to(tl.int32)
    return other, pidx


@triton.jit
def _needs_mask(q0, q1, k0, k1, S, pidx, mask, MASKS: tl.constexpr):
    """False when every query q0..q1-1 sees every key k0..k1-1 (a FULL tile: no elementwise work)."""
    off, window, prefix, _, _, _ = mask
    need = k1 > S  # padded query rows need no mask: nothing of them is stored
    if ELEMENTWISE & MASKS:  # document ids, a mask tensor: read in every tile
        need = need | True
    if CAUSAL & MASKS:
        full = k1 - 1 <= q0 + off  # the first query already sees the last key
        if WINDOW & MASKS:
            full = full & (k0 > q1 - 1 + off - window)  # and the last query still sees the first key
        if PREFIX & MASKS:
            full = full | (k1 <= prefix)
        need = need | (~full)
    if TILES & MASKS:
        need = need | (pidx >= 0)
    return need


@triton.jit
def _dense_at(i, j, b, h, MT):
    """Where (b, h, i, j) sits in the mask tensor, from its strides (0 where it broadcasts)."""
    return (b * tl.load(MT + _MASK_SB) + h * tl.load(MT + _MASK_SH) + i * tl.load(MT + _MASK_SL)
            + j * tl.load(MT + _MASK_SS))


@triton.jit
def _visible(i, j, b, h, L, S, t_q0, t_k0, pidx, mask, MASKS: tl.constexpr, BLOCK_K: tl.constexpr):
    """Which (query i, key j) pairs are visible; i and j are index tensors that broadcast to a tile whose
    first query and key are t_q0 and t_k0."""
    off, window, prefix, MT, MASK, PACK = mask
    vis = (i < L) & (j < S)
    if CAUSAL & MASKS:
        rule = j <= i + off
        if WINDOW & MASKS:
            rule = rule & (j > i + off - window)
        if PREFIX & MASKS:
            rule = rule | (j < prefix)
        vis = vis & rule
    if DOCS & MASKS:
        DOC = MT + tl.load(MT + _DOC_AT) + b * tl.load(MT + _DOC_SB)
        di = tl.load(DOC + i, mask=i < L, other=-1)
        dj = tl.load(DOC + j, mask=j < S, other=-2)
        vis = vis & (di == dj)
    if DENSE_BOOL & MASKS:  # a bool mask tensor
        keep = tl.load(MASK + _dense_at(i, j, b, h, MT), mask=(i < L) & (j < S), other=0)
        vis = vis & (keep != 0)
    if TILES & MASKS:  # the stored mask of a PARTIAL tile of the block map (pidx < 0: a FULL tile)
        inside = (pidx >= 0) & (i < L) & (j < S)
        at = pidx.to(tl.int64) * tl.load(MT + _PACK_ST) + b * tl.load(MT + _PACK_SN) + h * tl.load(MT + _PACK_SH)
        keep = tl.load(PACK + at + (i - t_q0) * BLOCK_K + (j - t_k0), mask=inside, other=1)
        vis = vis & (keep != 0)
    return vis


@triton.jit
def _masked(s, i, j, b, h, q0, k0, L, S, pidx, mask, MASKS: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr):
    """A tile of scores s (base 2) with a float mask added and hidden pairs at -inf; i, j broadcast to s.
    Only a PARTIAL tile does elementwise masking work."""
    if DENSE_FLOAT & MASKS:  # a float mask's values, in base 2 as the scores
        x = tl.load(mask[4] + _dense_at(i, j, b, h, mask[3]), mask=(i < L) & (j < S), other=0.0)
        s = s + x.to(tl.float32) * _LOG2E
    if _needs_mask(q0, q0 + BLOCK_M, k0, k0 + BLOCK_N, S, pidx, mask, MASKS):
        s = tl.where(_visible(i, j, b, h, L, S, q0, k0, pidx, mask, MASKS, BLOCK_N), s, float("-inf"))
    return s


# ---- reading a head: (pointer to its first element, row stride, column stride, column offsets, columns) ----


@triton.jit
def _head(X, base, s_row, s_col, offs_d, D):
    """One head of a (batch, heads, rows, D) tensor that starts ``base`` elements into X, read by strides."""
    return X + base, s_row, s_col, offs_d, D


@triton.jit
def _load(x, offs, n):
    """Rows ``offs`` of head x (:func:`_head`), zero past row n and past its D columns: (R, BLOCK_D)."""
    ptr, s_row, s_col, offs_d, D = x
    return tl.load(ptr + offs[:, None].to(tl.int64) * s_row + offs_d[None, :] * s_col,
                   mask=(offs[:, None] < n) & (offs_d[None, :] < D), other=0.0)


@triton.jit
def _row_stats(M, IL, D, bh, L, offs_m):
    """What the forward and the pre-pass saved per query row: m, 1/l and D (rows past L: P = 0, D = 0)."""
    m = tl.load(M + bh.to(tl.int64) * L + offs_m, mask=offs_m < L, other=float("inf"))
    inv_l = tl.load(IL + bh.to(tl.int64) * L + offs_m, mask=offs_m < L, other=0.0)
    Di = tl.load(D + bh.to(tl.int64) * L + offs_m, mask=offs_m < L, other=0.0)
    return m, inv_l, Di


@triton.jit
def _key_tile(q, kv, t, pid_m, q0, offs_m, b, h, L, S, qk_scale, mask, MASKS: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr):
    """Step t of a query tile's loop over key tiles: the tile's keys k, values v and masked scores s (base 2).
    ``kv``: the key head and the value head (:func:`_head`)."""
    kt, pidx = _tile_at(t, pid_m, mask, MASKS)
    k0 = kt * BLOCK_N
    offs_n = k0 + tl.arange(0, BLOCK_N)
    k = _load(kv[0], offs_n, S)
    v = _load(kv[1], offs_n, S)
    s = _dot(q, tl.trans(k), DOT_PREC) * qk_scale  # (BLOCK_M, BLOCK_N)
    s = _masked(s, offs_m[:, None], offs_n[None, :], b, h, q0, k0, L, S, pidx, mask, MASKS, BLOCK_M, BLOCK_N)
    return s, k, v


# ---- the kernels ----------------------------------------------------------------------------------------------


@_autotune(key=["BLOCK_E", "BLOCK_EV", "BLOCK_M", "BLOCK_N", "MASKS", "HAS_SINK"])
@triton.jit
def _fwd(Q, K, V, O, M, IL, SINK, sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sk_s, sk_e, sv_b, sv_h, sv_s, sv_e,
         H, G, L, S, E, EV, qk_scale, MT, MASK, PACK,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
         MASKS: tl.constexpr, DOT_PREC: tl.constexpr, HAS_SINK: tl.constexpr):
    """One query tile of one (batch, query head): its output rows, and per row the shift m and 1 / l. With
    ``HAS_SINK``, SINK holds the (H,) sink logits in float32, natural units."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)  # batch * H + query head
    b = bh // H
    h = bh % H
    hk = h // G  # the key/value head this query head shares (GQA): read, never repeated
    q0 = pid_m * BLOCK_M
    offs_m = q0 + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    mask = _mask_state(MT, MASK, PACK)
    q = _load(_head(Q, b.to(tl.int64) * sq_b + h * sq_h, sq_l, sq_e, offs_e, E), offs_m, L)  # (BLOCK_M, BLOCK_E)
    kv = (_head(K, b.to(tl.int64) * sk_b + hk * sk_h, sk_s, sk_e, offs_e, E),
          _head(V, b.to(tl.int64) * sv_b + hk * sv_h, sv_s, sv_e, offs_ev, EV))
    # --- the three running numbers of every row, as in the flash form (attnlab.kernels.online) ---
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max
    l = tl.zeros([BLOCK_M], tl.float32)  # running normaliser
    acc = tl.zeros([BLOCK_M, BLOCK_EV], tl.float32)  # running unnormalised output
    # --- which key tiles to visit: a span from the mask's rule, or the block map's list of non-EMPTY tiles ---
    t_lo, t_hi = _span(q0, pid_m, b, S, mask, MASKS, False, BLOCK_M, BLOCK_N)
    for t in range(t_lo, t_hi):
        s, k, v = _key_tile(q, kv, t, pid_m, q0, offs_m, b, h, L, S, qk_scale, mask, MASKS, BLOCK_M, BLOCK_N,
                            DOT_PREC)
        # --- online softmax: rescale what was gathered to the new max, then add the tile ---
        m_new = tl.maximum(m, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing yet: 0, not -inf - -inf
        p = tl.math.exp2(s - shift[:, None])  # unnormalised weights
        alpha = tl.math.exp2(m - shift)  # rescale what was gathered to the new max
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(_operand(p, v.dtype, DOT_PREC), v, DOT_PREC)  # acc += weights @ v
        m = m_new
    if HAS_SINK:  # --- the sink: one more score of every row, with no value (online.add_sink) ---
        sink = tl.load(SINK + h) * _LOG2E
        m = tl.where(l == 0.0, float("-inf"), m)  # a row that has gathered nothing: its shift says nothing
        m_new = tl.maximum(m, sink)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m - shift)
        l = l * alpha + tl.math.exp2(sink - shift)
        acc = acc * alpha[:, None]
        m = shift
    # --- finish (online.finish): acc / l. Saved per row for the backward: the shift m and 1 / l, so that
    # P = exp2(s - m) / l is recomputed as the forward made it (a single log-sum-exp in float32 would lose
    # |lse| ulps in exp). Rows with no visible key give 0 and save (+inf, 1): P = 0 in the backward ---
    dead = l == 0.0
    inv_l = 1.0 / tl.where(dead, 1.0, l)
    out = acc * inv_l[:, None]
    o_ptr = O + (bh.to(tl.int64) * L) * EV
    tl.store(o_ptr + offs_m[:, None] * EV + offs_ev[None, :], out.to(O.dtype.element_ty),
             mask=(offs_m[:, None] < L) & (offs_ev[None, :] < EV))
    tl.store(M + bh.to(tl.int64) * L + offs_m, tl.where(dead, float("inf"), m), mask=offs_m < L)
    tl.store(IL + bh.to(tl.int64) * L + offs_m, inv_l, mask=offs_m < L)


@triton.jit
def _bwd_pre(O, DO, D, L, EV, BLOCK_M: tl.constexpr, BLOCK_EV: tl.constexpr):
    """D = rowsum(dO * O), per query row, in float32."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_ev = tl.arange(0, BLOCK_EV)
    inside = (offs_m[:, None] < L) & (offs_ev[None, :] < EV)
    base = (bh.to(tl.int64) * L) * EV + offs_m[:, None] * EV + offs_ev[None, :]
    o = tl.load(O + base, mask=inside, other=0.0).to(tl.float32)
    do = tl.load(DO + base, mask=inside, other=0.0).to(tl.float32)
    tl.store(D + bh.to(tl.int64) * L + offs_m, tl.sum(o * do, 1), mask=offs_m < L)


@_autotune(key=["BLOCK_E", "BLOCK_EV", "BLOCK_M", "BLOCK_N", "MASKS"])
@triton.jit
def _bwd_dkdv(Q, K, V, DO, M, IL, D, DK, DV, sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sk_s, sk_e, sv_b, sv_h, sv_s, sv_e,
              H, G, L, S, E, EV, qk_scale, scale, MT, MASK, PACK,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
              MASKS: tl.constexpr, DOT_PREC: tl.constexpr):
    """One key tile: dK and dV summed over every query tile and every query head of its group."""
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1)  # batch * Hkv + key head
    Hkv = H // G
    b = bhk // Hkv
    hk = bhk % Hkv
    k0 = pid_n * BLOCK_N
    offs_n = k0 + tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    kv_in = offs_n[:, None] < S
    mask = _mask_state(MT, MASK, PACK)
    k = _load(_head(K, b.to(tl.int64) * sk_b + hk * sk_h, sk_s, sk_e, offs_e, E), offs_n, S)
    v = _load(_head(V, b.to(tl.int64) * sv_b + hk * sv_h, sv_s, sv_e, offs_ev, EV), offs_n, S)
    dk = tl.zeros([BLOCK_N, BLOCK_E], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_EV], tl.float32)
    t_lo, t_hi = _span(k0, pid_n, b, L, mask, MASKS, True, BLOCK_N, BLOCK_M)
    for g in range(0, G):
        h = hk * G + g
        bh = b * H + h
        q_head = _head(Q, b.to(tl.int64) * sq_b + h * sq_h, sq_l, sq_e, offs_e, E)
        do_head = _head(DO, bh.to(tl.int64) * L * EV, EV, 1, offs_ev, EV)  # dO: (N, H, L, EV), contiguous
        for t in range(t_lo, t_hi):
            qt, pidx = _tile_at(t, pid_n, mask, MASKS)
            q0 = qt * BLOCK_M
            offs_m = q0 + tl.arange(0, BLOCK_M)
            q = _load(q_head, offs_m, L)
            do = _load(do_head, offs_m, L)
            m, inv_l, Di = _row_stats(M, IL, D, bh, L, offs_m)
            # --- the tile's weights, transposed (keys x queries), recomputed from the saved m and 1/l ---
            sT = _dot(k, tl.trans(q), DOT_PREC) * qk_scale
            sT = _masked(sT, offs_m[None, :], offs_n[:, None], b, h, q0, k0, L, S, pidx, mask, MASKS, BLOCK_M,
                         BLOCK_N)
            pT = tl.math.exp2(sT - m[None, :]) * inv_l[None, :]  # (BLOCK_N, BLOCK_M), recomputed
            dv += _dot(_operand(pT, do.dtype, DOT_PREC), do, DOT_PREC)  # dV += P^T dO
            dpT = _dot(v, tl.trans(do), DOT_PREC)  # dP^T = V dO^T
            dsT = pT * (dpT - Di[None, :])  # dS = P * (dP - D)
            dk += _dot(_operand(dsT, q.dtype, DOT_PREC), q, DOT_PREC)  # dK += dS^T Q
    out_in = kv_in & (offs_e[None, :] < E)
    tl.store(DK + (bhk.to(tl.int64) * S) * E + offs_n[:, None] * E + offs_e[None, :],
             (dk * scale).to(DK.dtype.element_ty), mask=out_in)
    tl.store(DV + (bhk.to(tl.int64) * S) * EV + offs_n[:, None] * EV + offs_ev[None, :],
             dv.to(DV.dtype.element_ty), mask=kv_in & (offs_ev[None, :] < EV))


@_autotune(key=["BLOCK_E", "BLOCK_EV", "BLOCK_M", "BLOCK_N", "MASKS"])
@triton.jit
def _bwd_dq(Q, K, V, DO, M, IL, D, DQ, sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sk_s, sk_e, sv_b, sv_h, sv_s, sv_e,
            H, G, L, S, E, EV, qk_scale, scale, MT, MASK, PACK,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
            MASKS: tl.constexpr, DOT_PREC: tl.constexpr):
    """One query tile: dQ summed over its key tiles."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // G
    q0 = pid_m * BLOCK_M
    offs_m = q0 + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    q_in = offs_m[:, None] < L
    mask = _mask_state(MT, MASK, PACK)
    q = _load(_head(Q, b.to(tl.int64) * sq_b + h * sq_h, sq_l, sq_e, offs_e, E), offs_m, L)
    do = _load(_head(DO, bh.to(tl.int64) * L * EV, EV, 1, offs_ev, EV), offs_m, L)
    m, inv_l, Di = _row_stats(M, IL, D, bh, L, offs_m)
    kv = (_head(K, b.to(tl.int64) * sk_b + hk * sk_h, sk_s, sk_e, offs_e, E),
          _head(V, b.to(tl.int64) * sv_b + hk * sv_h, sv_s, sv_e, offs_ev, EV))
    dq = tl.zeros([BLOCK_M, BLOCK_E], tl.float32)
    t_lo, t_hi = _span(q0, pid_m, b, S, mask, MASKS, False, BLOCK_M, BLOCK_N)
    for t in range(t_lo, t_hi):
        s, k, v = _key_tile(q, kv, t, pid_m, q0, offs_m, b, h, L, S, qk_scale, mask, MASKS, BLOCK_M, BLOCK_N,
                            DOT_PREC)
        p = tl.math.exp2(s - m[:, None]) * inv_l[:, None]  # the tile's weights, recomputed
        dp = _dot(do, tl.trans(v), DOT_PREC)  # dP = dO V^T
        ds = p * (dp - Di[:, None])  # dS = P * (dP - D)
        dq += _dot(_operand(ds, k.dtype, DOT_PREC), k, DOT_PREC)  # dQ += dS K
    tl.store(DQ + (bh.to(tl.int64) * L) * E + offs_m[:, None] * E + offs_e[None, :],
             (dq * scale).to(DQ.dtype.element_ty), mask=q_in & (offs_e[None, :] < E))
