"""The flash forward for sparse masks: each query tile against one contiguous band of keys.

A sliding window or a document mask lets a query tile see a short run of keys. Walking that run
tile by tile (256 x 256) costs a dozen small tensor operations per tile, and a band narrower than
a tile wastes most of it. Here each query tile of ``BAND_BLOCK_Q`` rows gets the one key range
``[start, start + W)`` that covers every key any of its rows sees. Consecutive query tiles form a
batch, and each head of a batch is five operations: one batched matmul for the scores, an add of
-inf on the band's edge columns only (the columns every row sees are not touched), one exp2, one
sum, one batched matmul with the values (a built-in score modifier adds one pass: flash.py [P12]).
The range holds every visible key, so each row's softmax is complete in one step: no rescaling.

Why one head at a time: evenly spaced bands (a window) overlap in memory, and ``torch.bmm`` reads
such a strided view of one head's keys in place, where a matmul over (heads, bands) would first
copy every band (9x the keys for a window of 512). Uneven bands (documents) are gathered. A batch
holds at most ``BATCH_SCORES`` scores per head (4 MiB), so its scores stay in the cache between the
five operations. Scores are in base-2 units, as in :mod:`attnlab.kernels.flash` ([P8] there).

The layout of the bands (:class:`Bands`: ranges, batches and the additive mask of each batch's edge columns)
depends only on the mask and the sizes, so it is built once and cached, like the block map. The flash form's plan
(:mod:`attnlab.kernels.flash_plan`) takes the bands only where they do less work than the tiles: they cover at
most ``MAX_FRACTION`` of L x S (never full or causal attention), and compute at most ``SHARE_OF_TILES`` of the
scores of the tiles the mask does not skip (documents aligned to the tiles leave the tile walk nothing to waste).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from . import online
from .dtypes import half_product_fits
from .masks import Mask
from .mods import Fused
from .online import LOG2E

BAND_BLOCK_Q = 64  # query rows per band: the band is (rows + window) wide, so fewer rows waste less
BATCH_SCORES = 1 << 20  # scores per head and batch of bands (4 MiB in float32): they stay in the cache
MAX_FRACTION = 0.4  # use bands only when they cover at most this share of all L x S scores
SHARE_OF_TILES = 0.9  # ... and at most this share of the scores of the tiles the mask does not skip (measured,
# benchmarks/flash_levers.py: a window of 1024 at T = 8192, 0.90 of the tiles' scores, took 0.87 of their time on the
# bands; 2048, 0.96 of the scores, took 1.08)
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # mask -> {sizes: Bands or None}


@dataclass(frozen=True)
class Batch:
    """Query tiles ``t0:t1`` (rows t0*bq : t1*bq), each against the W keys ``start + arange(W)``."""

    t0: int
    t1: int
    W: int
    starts: tuple  # per tile: its first key, counted from the front of the padded keys
    step: int | None  # the common difference of ``starts``, when they are evenly spaced (a strided view)
    cols: tuple  # (c0, c1) runs of columns that some row does not see: only they are masked
    bias: tuple  # per run: (Nb, Hb, nb, bq, c1 - c0) float32, -inf where the row does not see the key, else 0


@dataclass(frozen=True)
class Bands:
    """The key bands of one mask and size: the query tiles' batches, each tile against its one range of keys."""

    block_q: int
    pad: int  # zero keys put in front of k and v, so that a band may start before key 0
    batches: tuple
    reach: tuple | None = None  # (largest kv_idx - q_idx any row sees, least over rows of each one's largest)

    @property
    def scores(self) -> int:
        """How many scores per head the bands compute (the work, to weigh against the tiles')."""
        return sum((b.t1 - b.t0) * self.block_q * b.W for b in self.batches)


def bands(mask: Mask, N: int, H: int, L: int, S: int, rows: int, device="cpu",
          batch: int | None = None) -> Bands | None:
    """The bands for a mask and sizes, or None when they would cover more than ``MAX_FRACTION`` of L x S. Cached.
    ``batch``: the scores per head and batch of bands (None: ``BATCH_SCORES``)."""
    batch = BATCH_SCORES if batch is None else batch
    built = _BUILT.setdefault(mask, {})
    key = (N, H, L, S, rows, batch, str(device))
    if key not in built:
        built[key] = _build(mask, N, H, L, S, rows, device, batch)
    return built[key]


def _build(mask, N, H, L, S, bq, device, batch):
    nq = -(-L // bq)
    # the first and last visible key of each query tile, over every row, batch and head
    lo, hi = mask.spans(N, H, L, S, bq, per_batch=False, device=device)[0].T.tolist()
    widths = [h - l for l, h in zip(lo, hi, strict=True)]
    if sum(widths) * bq > MAX_FRACTION * L * S:
        return None
    pad = _round(max(widths))
    batches, t, reach = [], 0, []
    while t < nq:  # consecutive tiles, as many as fit the budget at the widest band among them
        t1, W = t + 1, _round(widths[t])
        while t1 < nq and bq * (t1 + 1 - t) * max(W, _round(widths[t1])) <= batch:
            W = max(W, _round(widths[t1]))
            t1 += 1
        starts = [hi[i] - W for i in range(t, t1)]  # each band ends at its last visible key
        steps = {b - a for a, b in zip(starts, starts[1:], strict=False)}
        j = torch.tensor(starts, device=device)[:, None] + torch.arange(W, device=device)  # (nb, W)
        i = torch.arange(t * bq, t1 * bq, device=device).clamp(max=L - 1).view(1, 1, t1 - t, bq, 1)
        b = torch.arange(N, device=device).view(N, 1, 1, 1, 1)
        h = torch.arange(H, device=device).view(1, H, 1, 1, 1)
        m = torch.as_tensor(mask(b, h, i, j.clamp(min=0).view(1, 1, t1 - t, 1, W), L, S), device=device)
        m = m.reshape((1,) * (5 - m.dim()) + tuple(m.shape)) & (j >= 0).view(1, 1, t1 - t, 1, W)
        m = m.expand(-1, -1, t1 - t, bq, W)
        rel = torch.where(m, j.view(1, 1, t1 - t, 1, W) - i, torch.iinfo(torch.int64).min).amax(dim=-1)
        reach.append(rel[rel > torch.iinfo(torch.int64).min])  # each row's largest kv_idx - q_idx, if it sees any
        cols = _runs((~m).flatten(0, 3).any(dim=0).tolist())
        batches.append(Batch(t, t1, W, tuple(s + pad for s in starts), _step(steps),
                             tuple(cols), tuple(_additive(m[..., c0:c1]) for c0, c1 in cols)))
        t = t1
    rel = torch.cat(reach)
    return Bands(bq, pad, tuple(batches), (int(rel.max()), int(rel.min())) if rel.numel() else None)


def _round(width: int) -> int:
    """A band width, rounded up to a multiple of 16 when it is wide: matmuls run faster on aligned rows
    (the extra keys are hidden like any key the rows do not see)."""
    return max(width, 1) if width < 64 else -(-width // 16) * 16


def _additive(seen: torch.Tensor) -> torch.Tensor:
    """A bool mask (Nb, Hb, nb, bq, c) as an additive one: 0 where seen, -inf where hidden (one add instead
    of a masked fill). When every band of the batch has the same pattern (a sliding window), one is kept."""
    if seen.shape[2] > 1 and bool((seen == seen[:, :, :1]).all()):
        seen = seen[:, :, :1]
    return torch.zeros(seen.shape, device=seen.device).masked_fill_(~seen, float("-inf"))


def _step(steps: set) -> int | None:
    """The common difference of a batch's band starts (0 for a single band), or None when uneven."""
    if len(steps) > 1:
        return None
    return steps.pop() if steps else 0


def _runs(flags: list) -> list:
    """The (start, end) of each run of True in a list of flags."""
    runs, start = [], None
    for c, f in enumerate([*flags, False]):
        if f and start is None:
            start = c
        elif not f and start is not None:
            runs.append((start, c))
            start = None
    return runs


@dataclass(frozen=True)
class _Call:
    """What every batch of one band forward reads: the queries in tile-major rows, the keys and values (and the
    early batches' copies behind their zero rows), the results being written, and how scores are made."""

    qs: torch.Tensor  # (Z, nq, G*bq, E) with Z = N*Hkv
    kv: tuple  # (k3, v3, kp, vp): k and v as (Z, S, .), and the copies with p.pad zero rows in front
    out: tuple  # (out, l, m): (Z, nq, G*bq, Ev), (Z, nq, G*bq, 1) twice
    bufs: tuple  # (scores, scratch, half): one batch each [P3], the soft-cap's scratch, the rounded weights [P11]
    how: tuple  # (alpha, bounded, mod, bound): the product's alpha, shift 0, the fused modifier, |alpha q.k| bound


def forward(q, k, v, scale, p: Bands, half: torch.dtype | None = None, mod: Fused | None = None, rule=None,
            sinks: torch.Tensor | None = None):
    """Out (N, Hkv, G, L, Ev), lse (N, Hkv, G, L) and each row's (shift, normaliser) in base-2 units, as
    :func:`attnlab.kernels.flash.forward_tiles` with ``keep_norm=True`` gives them (:func:`online.finish`).

    ``half``: the inputs' half dtype; the weights are rounded to it and multiplied by the values in it,
    the sums kept in float32 (flash.py [P11]). A band holds a row's every key, so its product is
    rounded once, not once per tile.

    ``mod``: a fused modifier (:class:`attnlab.kernels.mods.Fused`), fused as the tiles fuse it (flash.py [P12]):
    the soft-cap's tanh on each band, ALiBi's and T5's bias made once per batch -- once per call for a window, whose
    bands all have the same distances -- and added per head. ``rule``: the plan's bounded rule
    (:class:`attnlab.kernels.flash_plan.Bounded`, with the bands' own reach), or None for the running max: the
    bands take shift 0 when it allows |q.k| over the whole call (flash.py [P2]).

    ``sinks``: (H,) sink logits in q's dtype, folded into each row once its band is done, as the tiles fold them
    (:func:`attnlab.kernels.online.add_sink`)."""
    N, Hkv, G, L, E = q.shape
    Ev = v.shape[3]
    bq, Z = p.block_q, N * Hkv
    nq = -(-L // bq)
    # scale and log2(e) ride on the score matmul (exp2 of these scores is exp of the true ones; flash.py [P1]);
    # q is read contiguous: a transposed q (as transformers passes it) cannot be viewed below
    alpha = scale * LOG2E if mod is None else mod.alpha(scale)
    qs = q.contiguous()
    if nq * bq != L:  # pad the last tile's rows; the mask hides nothing there, they are dropped
        qs = torch.cat([qs, qs.new_zeros(N, Hkv, G, nq * bq - L, E)], dim=3)
    qs = qs.view(Z, G, nq, bq, E).transpose(1, 2).reshape(Z, nq, G * bq, E)  # tile-major rows
    qk = online.qk_bound(qs, k)  # |q.k| <= |q| |k|: when no score can leave [-safe_logit, safe_logit], no shift
    bounded = rule is not None and rule.allows(qk)
    if half == torch.float16 and not half_product_fits(half, max(b.W for b in p.batches) * float(v.abs().amax())):
        half = None  # |P V| <= W max|v| with P <= 1: a float16 product could pass 65504
    k3, v3 = k.reshape(Z, -1, E), v.reshape(Z, -1, Ev)
    if half is not None:  # [P11] the values in the half dtype (exact: they are half values upcast)
        v3 = v3.to(half)
    front = max((max(b.starts) + b.W for b in p.batches if min(b.starts) < p.pad), default=p.pad) - p.pad
    buf = q.new_empty(max((b.t1 - b.t0) * G * bq * b.W for b in p.batches))  # one batch of scores, reused
    call = _Call(qs, (k3, v3, _front(k3, p.pad, front), _front(v3, p.pad, front)),  # only the keys they reach
                 (q.new_empty(Z, nq, G * bq, Ev), q.new_empty(Z, nq, G * bq, 1), q.new_zeros(Z, nq, G * bq, 1)),
                 (buf, torch.empty_like(buf) if mod is not None and mod.scratch else None,
                  None if half is None else torch.empty_like(buf, dtype=half)),
                 (alpha, bounded, mod, qk * abs(alpha)))
    for b in p.batches:
        _batch(call, b, p, Hkv, G)

    def rows(x):  # (Z, nq, G*bq, ...) in tile-major rows -> (N, Hkv, G, L, ...)
        x = x.view(Z, nq, G, bq, *x.shape[3:]).transpose(1, 2).reshape(N, Hkv, G, nq * bq, *x.shape[3:])
        return x[:, :, :, :L]

    out, l_all, m_all = call.out
    m_all, l_all = m_all[..., 0], l_all[..., 0]
    if sinks is not None:  # row g*bq + r of a tile is query head hk * G + g, and z = n * Hkv + hk
        sink2 = (sinks * LOG2E).view(1, Hkv, 1, G, 1).expand(N, Hkv, nq, G, bq).reshape(Z, nq, G * bq)
        m_all, l_all, out = online.add_sink(m_all, l_all, out, sink2)
    out, lse, shift, l = online.finish(m_all, l_all, out)  # rows that see no key: out 0
    return rows(out), rows(lse), (rows(shift), rows(l))


def _batch(call: _Call, b: Batch, p: Bands, Hkv: int, G: int) -> None:
    """One batch of bands, one head at a time (its bands are a strided view of its keys, no copy)."""
    k3, v3, kp, vp = call.kv
    early = min(b.starts) < p.pad  # a band that starts before key 0: the keys behind their zero rows
    kx, vx, shift = (kp, vp, 0) if early else (k3, v3, p.pad)
    idx = None if b.step is not None and b.step >= 0 else _index(b, k3.device, shift)
    alpha, bounded, mod, bound = call.how
    made = None if mod is None else mod.band_bias(_distances(b, p, k3.device), Hkv * G, call.qs.dtype, k3.device,
                                                  BATCH_SCORES)
    out, l_all, m_all = call.out
    buf, scratch, half_buf = call.bufs
    nb, W = b.t1 - b.t0, b.W
    for z in range(k3.shape[0]):
        # -- 1. scores of the batch's query tiles against their bands, modified [P12] --
        s = buf[:nb * G * p.block_q * W].view(nb, G * p.block_q, W)  # written in place: no fresh pages per batch
        torch.baddbmm(s, call.qs[z, b.t0:b.t1], _band(kx[z], b, idx, shift).transpose(1, 2), beta=0, alpha=alpha,
                      out=s)
        s4 = s.view(nb, G, p.block_q, W)
        if mod is not None:
            mod.band(s4, made, z % Hkv, None if scratch is None else scratch[:s.numel()].view(s4.shape), bound)
        # -- 2. masked: -inf only where some row does not see --
        for (c0, c1), bias in zip(b.cols, b.bias, strict=True):
            hide = _bias_of(bias, z, Hkv, G)
            if bounded:  # finite scores: one add ([P9] in flash.py)
                s4[..., c0:c1].add_(hide)
            else:  # a score may be +inf, and +inf - inf is NaN: fill instead
                s4[..., c0:c1].masked_fill_(torch.isneginf(hide), float("-inf"))
        # -- 3. the softmax of each row, complete: its band holds every key it sees (one online step, no rescale) --
        if bounded:
            s.exp2_()
        else:
            m_all[z, b.t0:b.t1] = online.shift_(s).unsqueeze(-1)  # a row that sees nothing: shift 0, not -inf
        l_all[z, b.t0:b.t1] = s.sum(dim=-1, keepdim=True)
        # -- 4. weights @ values, normalised by online.finish --
        if half_buf is None:
            torch.bmm(s, _band(vx[z], b, idx, shift), out=out[z, b.t0:b.t1])
        else:  # [P11] P rounded to the input dtype, a half product into the float32 output
            p_half = half_buf[:s.numel()].view(s.shape).copy_(s)
            out[z, b.t0:b.t1].copy_(torch.bmm(p_half, _band(vx[z], b, idx, shift)))


def _distances(b: Batch, p: Bands, device) -> torch.Tensor:
    """kv_idx - q_idx of row r of tile t against column c of its band, (nb or 1, bq, W): starts[t] - pad + c
    - (t0 + t) * bq - r, the same for every tile of a batch whose bands step by exactly bq (a window): one is kept."""
    bq = p.block_q
    first = torch.tensor(b.starts, device=device) - p.pad - torch.arange(b.t0, b.t1, device=device) * bq  # (nb,)
    if bool((first == first[0]).all()):
        first = first[:1]
    return (first.view(-1, 1, 1) + torch.arange(b.W, device=device).view(1, 1, -1)
            - torch.arange(bq, device=device).view(1, -1, 1))  # (nb or 1, bq, W)


def _front(x: torch.Tensor, pad: int, n: int) -> torch.Tensor:
    """(Z, pad + n, E): ``pad`` zero rows, then the first n rows of x (Z, S, E)."""
    out = x.new_zeros(x.shape[0], pad + n, x.shape[2])
    n = min(n, x.shape[1])
    out[:, pad:pad + n] = x[:, :n]
    return out


def _index(b: Batch, device, shift: int = 0) -> torch.Tensor:
    """The key positions of a batch's bands, (nb * W,), less ``shift``, for bands not evenly spaced."""
    starts = torch.tensor(b.starts, device=device) - shift
    return (starts[:, None] + torch.arange(b.W, device=device)).reshape(-1)


def _band(x: torch.Tensor, b: Batch, idx: torch.Tensor | None, shift: int) -> torch.Tensor:
    """One head's keys (or values) of a batch's bands, (nb, W, E): a strided view when evenly spaced
    (bands overlap in memory; bmm reads them in place), else gathered. Band starts count from
    ``shift`` rows before x's first row."""
    nb = b.t1 - b.t0
    if idx is None and x.is_contiguous():
        st = x.stride()
        return x.as_strided((nb, b.W, x.shape[1]), (b.step * st[0], st[0], st[1]),
                            x.storage_offset() + (b.starts[0] - shift) * st[0])
    return x.index_select(0, idx if idx is not None else _index(b, x.device, shift)).view(nb, b.W, x.shape[1])


def _bias_of(bias: torch.Tensor, z: int, Hkv: int, G: int) -> torch.Tensor:
    """Head z's part of a batch's (Nb, Hb, nb, bq, c) additive mask, broadcastable to (nb, G, bq, c)."""
    Nb, Hb = bias.shape[:2]
    n, hk = divmod(z, Hkv)
    t = bias[n if Nb > 1 else 0]  # (Hb, nb, bq, c)
    if Hb == 1:
        return t.transpose(0, 1)  # (nb, 1, bq, c)
    return t[hk * G:(hk + 1) * G].transpose(0, 1)  # the query heads of key head hk
