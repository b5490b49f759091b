"""ALiBi's far keys, dropped where their weights are exactly 0 ([P13] of :mod:`attnlab.kernels.flash`).

ALiBi adds slope x (kv_idx - q_idx) to each score: under the causal mask a key d positions back loses slope x d.
On the flash form's bounded path a weight is exp2(s) (no running max, shift 0), and in the backward
exp2(s - lse), with s at most log2(e) (|q.k| scale - slope d). Once that falls below the working dtype's least
subnormal (2^-149 in float32, 2^-1074 in float64) the weight is 0 -- not small, 0 -- so leaving the key out
changes no number but the order of the sums. A steep head therefore needs only the last few hundred keys.

:func:`alibi_heads` finds, for each key head, the window beyond which every weight is 0 (rounded up to a
multiple of ``QUANTUM``, so that calls share a few masks and their block maps and band plans), and the flash
form runs each run of key heads with the same window as a call of its own (the bands, or the tiles with the
window's block map); heads that would gain little run together, causal. It needs finite values (0 x inf is NaN
in the full sum) and no dropout (whose keep-mask depends on the head). :func:`reach` is what the mask's closed
form says about the distances a row sees, which the fused modifiers' bounds (:meth:`attnlab.kernels.mods.Fused.bounded`)
use.

Measured (AMD EPYC, 2 threads, float32, B = 1, H = 8, d = 64, ALiBi's paper slopes, causal): 5 of the 8 heads
run over windows of 320 to 4416 keys at T = 8192, and the split took 1.02 of the unsplit form's time forward
there and 0.96 forward + backward at T = 4096 (benchmarks/results/flash_levers-amd-epyc.txt); runs by hand the
same day read 0.87-0.98 forward and 0.89-0.98 forward + backward. The gain is small because the heads that
keep most of their keys hold most of the work; it is exact, so it stays. Tried under a sliding window of 512
too, where it gained nothing (one head of eight had a narrower window), so it is taken under the causal mask
only.
"""

from __future__ import annotations

import math

import torch

from . import masks, online
from .mods import ALiBi
from .online import LN2, SAFE_LOGIT

_WINDOWS: dict = {}  # window -> its Mask, one instance each: its block maps and band plans are cached with it
QUANTUM = 64  # [P13] windows rounded up to a multiple of this: few distinct masks, and wider is still exact
WORTH = 0.75  # [P13] a head runs over a window only if it is at most this share of the queries


def reach(mask_fn, L: int, S: int) -> tuple | None:
    """(the largest kv_idx - q_idx any row sees, the least over the rows of each one's largest), from the mask's
    closed form, or None when it does not say: a causal part j <= i + off, with no prefix, where each row sees
    key i + off (it exists, and is in the row's own document when off = 0)."""
    rule = mask_fn.rule(L, S) if mask_fn is not None else None
    if rule is None or rule.off is None or rule.prefix is not None or (rule.doc is not None and rule.off != 0):
        return None
    return (rule.off, rule.off) if rule.off >= 0 and L - 1 + rule.off < S else None


def window(w: int):
    if w not in _WINDOWS:
        _WINDOWS[w] = masks.sliding_window(w)
    return _WINDOWS[w]


def alibi_heads(args, mod, work, half) -> list | None:
    """[P13] ALiBi under the causal mask, on the bounded path: the runs of key heads ``(h0, h1, window or None)``
    whose weights of keys more than ``window - 1`` back are all exactly 0, or None when no head gains.

    On the bounded path [P2] a weight is exp2(s) with s <= log2(e) (|q.k| scale - slope (i - j)), and in the
    backward exp2(s - lse) with lse >= the row's own score >= -|q.k| scale. Both are exactly 0 in the working
    dtype once log2(e) (2 |q.k| scale - slope d) < -(the exponent of its least subnormal + 2): 151 in float32
    (bfloat16 weights round from float32 ones), 1076 in float64. Dropping those keys changes no number but the
    order of the sums; the values must be finite (0 x inf is NaN in the full sum)."""
    if not isinstance(mod, ALiBi) or not args.is_causal or args.L > args.S or args.dropout_p > 0 or \
            args.attn_mask is not None or half == torch.float16 or work not in (torch.float32, torch.float64):
        return None
    vmapped = torch._C._functorch.is_functorch_wrapped_tensor(args.q)
    if WORTH * args.L < QUANTUM or mod.slopes.numel() < args.H or vmapped:
        return None  # no window could be taken (decoding); too few slopes (the form's own check names it); vmap
    qk = online.qk_bound(args.q, args.k) * abs(args.scale)
    if not math.isfinite(qk) or not mod.bounded(qk, (0, 0), SAFE_LOGIT) or not bool(torch.isfinite(args.v).all()):
        return None
    floor = 151 if work == torch.float32 else 1076
    least = mod.slopes.detach()[:args.H].double().view(args.Hkv, args.groups).amin(dim=1).tolist()  # per key head
    runs: list = []
    for hk, slope in enumerate(least):
        d = (2 * qk + floor * LN2) / slope if slope > 0 else math.inf  # no weight more than d back is nonzero
        w = -(-(math.floor(d) + 1) // QUANTUM) * QUANTUM if d < args.L else math.inf  # keys i - w < j <= i
        w = w if w <= WORTH * args.L else None
        if runs and runs[-1][2] == w:
            runs[-1][1] = hk + 1
        else:
            runs.append([hk, hk + 1, w])
    if all(w is None for *_, w in runs):
        return None
    return [tuple(r) for r in runs]
