"""The online softmax: the running numbers of a block of query rows, and the rules every tiled kernel keeps.

softmax(s) @ v over keys that arrive a tile at a time needs, per query row, three running numbers
(Milakov & Gimelshein, "Online normalizer calculation for softmax", 2018):

* ``m``   -- the shift: the largest score seen so far (or 0 when no score can overflow, see below);
* ``l``   -- the normaliser: the sum of exp(score - m) so far;
* ``acc`` -- the unnormalised output: the sum of exp(score - m) * value so far.

A tile that brings a larger max rescales what was gathered by exp(m_old - m_new) before its own
terms are added (:meth:`Running.rescale`, :meth:`Running.add`); after the last tile, acc / l is
softmax(s) @ v (:func:`finish`). This file is that arithmetic for the flash form's tiles, its band
path and ring attention; the Triton kernel (:mod:`attnlab.kernels.triton_kernels`) runs the same
steps on a GPU, one program per query tile, and keeps the same convention for what it saves.

Units. Scores are kept in base 2: each product is multiplied by scale * LOG2E, so exp(score - m)
is exp2(s - m), which a CPU and a GPU evaluate faster than exp. The shift m and the normaliser l are
in these units; the log-sum-exp handed out (to ring attention, to a caller) is in natural units,
float64: lse = (m + log2 l) * LN2.

The bounded rule. |q.k| <= |q| |k|; when that bound times |scale| is at most ``SAFE_LOGIT`` (40),
no score leaves [-40, 40], exp neither overflows nor underflows float32 (about e^-87 .. e^88), and
the shift may stay 0 for the whole row: no max, no rescale (:func:`bounded`).

Rows that see no key (every score -inf): exp(-inf - -inf) would be NaN, so the shift of a row that
has seen nothing yet is 0 (:func:`safe_shift`). At the end such a row has l = 0, and one convention
holds in every kernel (:func:`finish`):

* its output is 0 (not 0/0) and its lse is -inf (the log of an empty sum);
* what backward rebuilds the weights from, P = exp2(s - shift) / norm, is (shift, norm) = (m, l) for
  a row that saw keys -- forward's own numbers, so P is rebuilt exactly as forward divided it -- and
  (+inf, 1) for a row that saw none, so that P = 0 whatever its scores. The Triton kernel saves
  (shift, 1 / norm); from an lse alone (ring attention) the shift is the lse, +inf for -inf
  (:func:`shift_of_lse`), as FlashAttention-2 saves lse = +inf for an empty row.

Attention sinks (gpt-oss): a sink is one more score per row, its head's logit, with no value. It joins
the running numbers once, after the last key (:func:`add_sink`): the shift becomes the larger of the
row's max and the sink, what was gathered is rescaled to it, and exp2(sink - shift) is added to the
normaliser only. :func:`finish` then sees a row like any other -- its output is acc / l, its lse
log(sum_j exp(s_j) + exp(sink)), and (shift, norm) rebuild the keys' weights with the sink in the sum.
A row that sees no key has l = exp2(sink - sink) = 1 there: output 0, lse = sink, not a dead row.

Two partial results over disjoint sets of keys combine exactly (:func:`merge`), the way tiles do:
lse = log(exp(lse_a) + exp(lse_b)), out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2): base-2 units back to natural ones
# exp(+-40) is comfortably inside float32's normal range (about e^-87 .. e^88), and so is a sum of
# millions of such terms; rows whose scores provably stay within it need no running max.
SAFE_LOGIT = 40.0


def tanh_(x: torch.Tensor, spare: torch.Tensor, times: float = 1.0, doubled: bool = False,
          clamp: bool = True) -> torch.Tensor:
    """``times * tanh(x)`` in place, as e / ((e + 2) / times) with e = expm1(2x): exact near 0, where
    2 sigmoid(2x) - 1 is not, and faster than torch.tanh on a CPU. ``doubled``: x already holds 2x (the soft-cap
    folds the 2 into its matmul's alpha), which saves a pass; ``times`` rides on the denominator, which saves
    another. ``clamp``: keep |2x| <= 40 so that expm1 stays finite (tanh(20) is 1 in float64); False when the
    caller knows |2x| cannot reach 80 (expm1 overflows float32 near 88.7). ``spare``: a buffer of x's shape.

    Three passes (expm1, the denominator, the divide) where torch.tanh and a multiply are two slower ones:
    0.54 ns an element against 0.63 for the five-pass form it replaced and 1.38 for torch.tanh (AMD EPYC,
    float32, benchmarks/results/flash_levers-amd-epyc.txt). Most of it is expm1 itself."""
    if clamp:
        x.clamp_(-40.0, 40.0) if doubled else x.clamp_(-20.0, 20.0)
    if not doubled:
        x.mul_(2.0)
    e = x.expm1_()
    torch.add(torch.full((), 2.0 / times, dtype=e.dtype, device=e.device), e, alpha=1.0 / times, out=spare)
    return e.div_(spare)


def expm1_fits(bound: float) -> bool:
    """True when :func:`tanh_` may skip its clamp: ``bound`` bounds |2x|, below where expm1 overflows float32."""
    return bound <= 80.0


def bounded(bound: float, scale: float, safe_logit: float = SAFE_LOGIT, mod=None, reach=None) -> bool:
    """True when no score can leave [-safe_logit, safe_logit]: ``bound`` bounds |q.k| (:func:`qk_bound`,
    :func:`head_bound`). With a fused score modifier ``mod`` (:class:`attnlab.kernels.mods.Fused`): when none passes
    safe_logit and each row's largest stays above -safe_logit (its ``bounded``, from the mask's ``reach``)."""
    if mod is not None:
        return mod.bounded(bound * abs(scale), reach, safe_logit)
    return bound * abs(scale) <= safe_logit


def qk_bound(q: torch.Tensor, k: torch.Tensor) -> float:
    """max|q| * max|k| over every query and key (last dim the head dim): it bounds every |q.k|."""
    with torch.no_grad():
        return float(q.norm(dim=-1).amax()) * float(k.norm(dim=-1).amax())


def key_norms(k: torch.Tensor) -> torch.Tensor:
    """The longest key of each head, (N, Hkv, 1) from k (N, Hkv, S, E): what :func:`head_bound` multiplies."""
    return k.norm(dim=-1).amax(dim=-1, keepdim=True)


def head_bound(qi: torch.Tensor, k_norms: torch.Tensor) -> float:
    """A bound on |q.k| over a tile of queries qi (N, Hkv, R, E) and the keys of their heads, whose longest are
    ``k_norms`` (:func:`key_norms`): the largest over the heads of max|q| * max|k|, tighter than :func:`qk_bound`."""
    return float((qi.norm(dim=-1) * k_norms).max())


def safe_shift(m: torch.Tensor) -> torch.Tensor:
    """The shift of rows whose max is ``m``: 0 where a row has seen nothing (-inf), so that exp2(-inf - 0) = 0."""
    return torch.where(torch.isneginf(m), 0.0, m)


def shift_(s: torch.Tensor, m: torch.Tensor | None = None, may_see_nothing: bool = True) -> torch.Tensor:
    """The first half of the online step, on scores s (..., c) in place: the new shift m_new, the larger of ``m``
    (None: nothing seen yet) and each row's max -- 0 for a row that has seen nothing when ``may_see_nothing``
    (:func:`safe_shift`) -- and s <- exp2(s - m_new). Returns m_new (...)."""
    top = s.amax(dim=-1)
    m_new = top if m is None else torch.maximum(m, top)
    if may_see_nothing:
        m_new = safe_shift(m_new)
    s.sub_(m_new.unsqueeze(-1)).exp2_()
    return m_new


@dataclass
class Running:
    """The running numbers of a block of R rows: ``m`` and ``l`` (B, R), ``acc`` (B, R, Ev), in base-2 units.

    Scores arrive as (B, R, c) tiles. :meth:`rescale` turns a tile into its weights and brings what
    was gathered to the new shift; :meth:`add` gathers the weights. A row block whose scores are
    bounded (:func:`bounded`) starts with its shift fixed at 0 and never rescales (:meth:`weigh`).
    """

    m: torch.Tensor
    l: torch.Tensor
    acc: torch.Tensor
    fixed: bool = False  # the shift stays 0 (bounded scores): no running max, no rescale

    @classmethod
    def start(cls, like: torch.Tensor, B: int, R: int, Ev: int, fixed: bool = False) -> Running:
        """Nothing seen yet: l = 0, acc = 0, and m = -inf (the running max) or, ``fixed``, the shift 0 (bounded)."""
        l = like.new_zeros(B, R)
        return cls(torch.full_like(l, 0.0 if fixed else float("-inf")), l, like.new_zeros(B, R, Ev), fixed)

    def weigh(self, s: torch.Tensor, may_see_nothing: bool = True) -> torch.Tensor:
        """The online step: a tile of scores s (B, R, c) -> its weights, in place. With the shift fixed at 0 that is
        exp2(s) alone; with the running max, :meth:`rescale`."""
        return s.exp2_() if self.fixed else self.rescale(s, may_see_nothing)

    def rescale(self, s: torch.Tensor, may_see_nothing: bool = True) -> torch.Tensor:
        """A tile of scores s (B, R, c) -> its weights exp2(s - m_new), in place; l and acc rescaled to m_new.

        ``may_see_nothing``: some row of the tile may have no visible key (a masked tile), so its max
        may be -inf: such a row keeps shift 0 (:func:`safe_shift`), never -inf - -inf."""
        m_new = shift_(s, self.m, may_see_nothing)
        alpha = torch.exp2(self.m - m_new)  # what was gathered against the old shift, brought to the new one
        self.l.mul_(alpha)
        self.acc.mul_(alpha.unsqueeze(-1))
        self.m = m_new
        return s

    def add(self, p: torch.Tensor, v: torch.Tensor, keep: torch.Tensor | None = None,
            half: torch.Tensor | None = None) -> None:
        """Gather weights p (B, R, c) against values v (B, c, Ev): l += rowsum(p), acc += (p * keep) @ v.

        The normaliser counts the weights before dropout; ``keep`` (p's shape, scaled by 1/(1-p)) drops
        some of them from the output only. p is used up (multiplied by ``keep``).

        ``half``: a buffer of p's shape in the inputs' half dtype, v in that dtype too (FlashAttention's
        recipe): p is rounded into it just before the matmul, and the half product is added into the
        float32 ``acc``. The normaliser is summed from the float32 p, before the rounding."""
        self.l.add_(p.sum(dim=-1))
        if keep is not None:
            p.mul_(keep.view(p.shape))
        if half is None:
            self.acc.baddbmm_(p, v)
        else:
            self.acc.add_(torch.bmm(half.copy_(p), v))  # P rounded to the input dtype, accumulated in float32


def add_sink(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, sink: torch.Tensor):
    """Fold each row's sink into its finished running numbers: m, l (...) and acc (..., Ev) -> (m, l, acc).

    ``sink`` (base-2 units, broadcastable to m) is one more score with no value: the shift becomes
    max(m, sink), l and acc are rescaled to it, and l gains exp2(sink - shift). The max is over the scores
    *and* the sink, as gpt-oss takes it: a sink far above the scores scales them to 0 instead of sending
    exp2(sink) past float32. acc is rescaled in place. A row that has seen nothing (l = 0, whatever its m: -inf,
    or the shift 0 that :func:`safe_shift` or the bounded rule gave it) gets shift = sink and l = 1 exactly,
    so its lse is the sink even where exp2(sink) would underflow; only a sink of -inf leaves it dead.
    Once per row after the last tile, not per tile: the sink's term costs O(rows), not O(rows x keys)."""
    m = torch.where(l == 0, float("-inf"), m)  # nothing gathered: its shift says nothing
    shift = safe_shift(torch.maximum(m, sink))
    alpha = torch.exp2(m - shift)  # 0 where m = -inf: nothing was gathered
    acc.mul_(alpha.unsqueeze(-1))
    return shift, l * alpha + torch.exp2(sink - shift), acc


def finish(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor):
    """The end of the walk: (out, lse, shift, norm) from each row's m, l (...) and acc (..., Ev).

    ``out = acc / l`` (acc is divided in place and returned), 0 for a row that saw no key (l = 0);
    ``lse = (m + log2 l) * LN2`` in float64 natural units, -inf for such a row; ``(shift, norm)``,
    what backward rebuilds P = exp2(s - shift) / norm from: (m, l), and (+inf, 1) for such a row.
    """
    dead = l == 0
    norm = torch.where(dead, 1.0, l)
    out = acc.div_(norm.unsqueeze(-1))
    shift = torch.where(dead, float("inf"), m)
    lse = (torch.where(dead, float("-inf"), m).double() + torch.log2(l.double())) * LN2
    return out, lse, shift, norm


def shift_of_lse(lse: torch.Tensor, dtype: torch.dtype):
    """(shift, corr) for rebuilding P = exp2(s - shift) * corr from a float64 natural-unit lse alone.

    shift = lse in base 2, rounded to ``dtype`` (+inf where lse = -inf: P = 0 whatever the score);
    corr = exp2(shift - lse) ~ 1 puts back what the rounding took (1 where it is not finite), so that
    the tile works in ``dtype`` and only the per-row factor is computed in float64."""
    lse2 = lse * LOG2E
    shift = torch.where(torch.isneginf(lse2), float("inf"), lse2).to(dtype)
    corr = torch.exp2(shift.double() - lse2).to(dtype)
    return shift, torch.where(torch.isfinite(corr), corr, 1.0)


def merge(out: torch.Tensor, lse: torch.Tensor, o: torch.Tensor, lo: torch.Tensor) -> None:
    """Fold a partial result (o, lo) over other keys into (out, lse), in place; natural-unit float64 lse.

    o is used up. Rows that saw nothing in both stay 0 with lse = -inf."""
    new = torch.logaddexp(lse, lo)
    base = torch.where(torch.isneginf(new), 0.0, new)  # exp(-inf - 0) = 0: no NaN from -inf - -inf
    out.mul_(torch.exp(lse - base).to(out.dtype).unsqueeze(-1))
    out.add_(o.mul_(torch.exp(lo - base).to(o.dtype).unsqueeze(-1)))
    lse.copy_(new)
