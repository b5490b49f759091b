"""FlashAttention's ``flash_attn_func``: its arguments in the oracle's terms, and the call.

    flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False)

q is (B, L, H, D), k and v (B, S, Hkv, D) -- heads third, one head dim for all three -- and query head h reads
key head h // (H / Hkv). What the arguments mean, as FlashAttention's interface documents them:

* query i sits at key position ``i + S - L``: the causal mask is aligned bottom-right, so with L > S the first
  L - S queries see no key (their output is zeros, their log-sum-exp -inf);
* ``window_size=(left, right)``: query i sees keys ``i + S - L - left ... i + S - L + right``, -1 unbounded;
  ``causal=True`` sets ``right`` to 0;
* ``softcap > 0``: each scaled score s becomes ``softcap * tanh(s / softcap)``, before the mask;
* ``alibi_slopes`` (H,) or (B, H), float32: ``-slope * |i + S - L - j|`` is added to the score after that;
* ``return_attn_probs=True``: returns ``(out, softmax_lse, S_dmask)``, softmax_lse float32 (B, H, L), the
  log-sum-exp of each row of the scaled (and capped, biased, masked) scores.

:func:`keys_seen` and :func:`score_mod` are those rules, written once; the varlen and paged APIs use them too.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from attnlab.judge import mod_cases
from attnlab.judge.apis import words
from attnlab.judge.cases import CAUSAL_BIAS, LOWER_RIGHT, Case
from attnlab.judge.facts import Cause
from attnlab.kernels import mods

NAME = "flash-attn"
BACKWARD = True
CAUSES = (
    Cause('api-top-left', "causal= (or window_size=, or ALiBi's distance) is aligned top-left, query i at key "
                          "position i: FlashAttention aligns it bottom-right, query i at key position i + S - L "
                          "(causal: keys j <= i + S - L; ALiBi: -slope * |i + S - L - j|)"),
    Cause('flash-window-swapped', "window_size's two sides are swapped: it is (left, right), query i sees keys "
                                  "i + S - L - left ... i + S - L + right"),
    Cause('flash-softcap-scale', "the soft-cap is taken on the scores before the softmax scale: cap "
                                 "softmax_scale * q.k, softcap * tanh(s / softcap) on the scaled score s"),
    Cause('flash-alibi-one-row', "(B, H) alibi_slopes are read as one row: batch element b has its own slopes, "
                                 "alibi_slopes[b, h]"),
    Cause('flash-alibi-signed', "ALiBi's distance is signed (i - j): keys ahead of the query are raised, not lowered; "
                                "the bias is -slope * |i + S - L - j|"),
    Cause('flash-window-edge', "the window's edge is off by one key: query i sees keys i + S - L - left through "
                               "i + S - L + right, both ends included"),
    Cause('flash-alibi-offset', "ALiBi's distance leaves out the S - L offset: query i sits at key position "
                                "i + S - L, the bias is -slope * |i + S - L - j|"),
)
TENSOR_MASKS = "flash_attn_func takes no attn_mask (its masks are causal= and window_size=)"


def keys_seen(L: int, S: int, causal: bool = False, window=(-1, -1)) -> torch.Tensor | None:
    """(L, S) bool, True where query i sees key j; None where every query sees every key."""
    left, right = window
    if causal:
        right = 0
    if left < 0 and right < 0:
        return None
    i, j = torch.arange(L)[:, None] + (S - L), torch.arange(S)[None, :]  # i: the query's key position
    seen = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    return seen


def keys_seen_at(L: int, S: int, offset: int, causal: bool = False, window=(-1, -1)) -> torch.Tensor | None:
    """:func:`keys_seen` with query i at key position ``i + offset`` (FlashAttention's is ``S - L``): how a kernel
    that places its queries elsewhere masks, and how varlen and paged sequences place theirs."""
    n = max(L, S - offset, 0)
    seen = keys_seen(n, n + offset, causal, window)
    return None if seen is None else seen[:L, :S]


def slopes(case: Case, args: dict) -> torch.Tensor | None:
    """The ALiBi slopes a case passes, float32: the paper's geometric ones (H,), or per batch element (B, H) -- a
    varlen case's batch elements are its sequences (``args["q"]``: their query counts)."""
    if args.get("alibi"):
        return mods.alibi_slopes(case.H).float()
    if args.get("alibi-batch"):
        B = len(args["q"]) if isinstance(args.get("q"), tuple) else math.prod(case.batch)
        return mods.alibi_slopes(case.H).float()[None] * (1.0 + 0.5 * torch.arange(B, dtype=torch.float32)[:, None])
    return None


def score_mod(case: Case, args: dict):
    """softcap, then ALiBi, as a score modifier ``(score, b, h, q_idx, kv_idx) -> score`` on the scaled scores."""
    cap = mod_cases.CAP if args.get("softcap") else None
    sl = slopes(case, args)
    if cap is None and sl is None:
        return None
    fn = _modifier(cap, sl, (case.S or case.L) - case.L)
    return mods.Mod.from_fn(fn, words("flash", softcap=cap is not None, alibi=sl is not None))


def _modifier(cap, sl, offset: int, cap_unscaled: float | None = None, signed: bool = False):
    """The soft-cap then ALiBi as a function of the scaled scores; ``cap_unscaled``: the cap taken on the scores
    before the softmax scale (this scale), as a kernel that caps q k^T and scales after does; ``signed``: ALiBi's
    distance without its absolute value."""
    def fn(score, b, h, q_idx, kv_idx):
        if cap is not None and cap_unscaled is not None:
            score = torch.tanh(score / cap_unscaled / cap) * cap * cap_unscaled
        elif cap is not None:
            score = torch.tanh(score / cap) * cap
        if sl is not None:
            s = sl.to(score)
            slope = s[b, h] if s.dim() == 2 else s[h]
            d = q_idx + offset - kv_idx
            score = score - slope * (d if signed else d.abs()).to(score.dtype)
        return score
    return fn


def visible(case: Case, args: dict):
    return keys_seen(case.L, case.S or case.L, bool(args.get("causal")), tuple(args.get("window", (-1, -1))))


def alternatives(case: Case, args: dict):
    """What flash_attn_func's kernels get wrong, in the oracle's terms (:class:`attnlab.judge.explain.Alternative`):
    causal aligned top-left, the window's sides swapped, the soft-cap taken before the scale, the (B, H) slopes read
    as one row, ALiBi's distance without the S - L offset."""
    from attnlab.judge import hypotheses
    from attnlab.judge.explain import Alternative

    L, S = case.L, case.S or case.L
    window, causal = tuple(args.get("window", (-1, -1))), bool(args.get("causal"))
    sl = slopes(case, args)
    if (causal or "window" in args or sl is not None) and L != S:  # query i at key position i, not i + S - L
        yield from _top_left(L, S, causal, window, sl is not None)
    if window[0] != window[1] and "window" in args:
        swapped = keys_seen(L, S, causal, window[::-1])
        yield Alternative("flash-window-swapped", lambda kw: {**kw, "attn_mask": swapped})
    cap = mod_cases.CAP if args.get("softcap") else None
    scale = case.E ** -0.5 if case.scale is None else float(case.scale)
    if cap is not None:
        yield Alternative("flash-softcap-scale", _with_mod(_modifier(cap, sl, S - L, cap_unscaled=scale)))
    if sl is not None and sl.dim() == 2:
        yield Alternative("flash-alibi-one-row", _with_mod(_modifier(cap, sl[0], S - L)))
    if sl is not None and L != S:
        yield Alternative("flash-alibi-offset", _with_mod(_modifier(cap, sl, 0)))
    if sl is not None and not causal:
        yield Alternative("flash-alibi-signed", _with_mod(_modifier(cap, sl, S - L, signed=True)))
    for edge in _edges(window):
        yield Alternative("flash-window-edge", lambda kw, edge=edge: {**kw, "attn_mask": keys_seen(L, S, causal, edge)})
    yield from hypotheses.padded_keys(S)
    yield from hypotheses.tail_dropped(S)
    if causal or "window" in args:
        yield from hypotheses.tail_dropped_per_block(L, S)
    if causal and "window" not in args:
        yield from hypotheses.causal_tiles_cut(L, S, S - L)


def _top_left(L: int, S: int, causal: bool, window, alibi: bool):
    """A kernel that places query i at key position i (PyTorch's is_causal) places it there for everything it
    measures from the query: the causal mask, the window and ALiBi's distance -- one alignment, one cause. Its
    variants: the mask and ALiBi both top-left, then each alone (the other measured right)."""
    from attnlab.judge.explain import Alternative

    n = max(L, S)
    masked = causal or window != (-1, -1)
    top = keys_seen(n, n, causal, window)[:L, :S] if masked else None

    def mask(kw):
        return {**kw, "attn_mask": top} if masked else kw

    def distance(kw):  # the modifier asked for query i's distance from key position i
        mod = kw["score_mod"]
        if mod is None:
            raise ValueError("no score_mod")
        return {**kw, "score_mod": lambda score, b, h, q_idx, kv_idx: mod(score, b, h, q_idx - (S - L), kv_idx)}

    if alibi:
        yield Alternative("api-top-left", lambda kw: distance(mask(kw)))
    if masked:
        yield Alternative("api-top-left", mask)


def _edges(window):
    """The window one key narrower or wider on each side it has, or on both at once (an off-by-one in the bound's
    test: |i - j| < w for <= w)."""
    left, right = window
    for side, bound in ((0, left), (1, right)):
        for d in (-1, 1):
            if bound >= 0 and bound + d >= 0:
                yield (bound + d, right) if side == 0 else (left, bound + d)
    for d in (-1, 1):
        if left >= 0 and right >= 0 and min(left, right) + d >= 0:
            yield left + d, right + d


def _with_mod(fn):
    return lambda kw: {**kw, "score_mod": fn}


def modifier_change(cap: float, scale: float):
    """The change of the oracle's arguments that takes the soft-cap before the softmax scale, for the APIs that
    take ``softcap=`` without ALiBi (varlen's and paged decode's cases)."""
    return _with_mod(_modifier(cap, None, 0, cap_unscaled=scale))


def express(c: Case) -> Case | str:
    """A case of verify's grid as a flash_attn_func call, or why it cannot be one."""
    S = c.S or c.L
    if (c.Ev or c.E) != c.E:
        return "flash_attn_func takes one head dim for q, k and v (here Ev != E)"
    if c.is_causal and c.mask is not None:
        return TENSOR_MASKS
    if c.is_causal and c.L != S:
        return ("flash_attn_func's causal= is aligned bottom-right: PyTorch's upper-left is_causal with L != S "
                "has no flash_attn_func spelling")
    causal = c.is_causal or c.mask in (LOWER_RIGHT - {"causal_lower_right & sliding_window"}) or (
        c.mask in ("causal", CAUSAL_BIAS[0]) and c.L == S)
    if c.mask is not None and not causal:
        return TENSOR_MASKS + (": a padding mask is flash_attn_varlen_func's cu_seqlens" if c.mask == "padding"
                               else "")
    if c.mod is not None and c.mod != "softcap":
        return ("flash_attn_func takes no score_mod (its modifiers are softcap= and alibi_slopes=, run in the "
                "flash-attn cases)")
    return replace(c, is_causal=False, mask="lower-right" if causal else None,
                   mod="flash: softcap" if c.mod else None, api=words(NAME, causal=causal, softcap=bool(c.mod)))


def extra() -> list[Case]:
    """flash_attn_func's own cases: windows, ALiBi, softcap with both, and a head dim of 128. The (H,) ALiBi case has
    12 heads, whose paper slopes (2^-0.5, 2^-1.5, ... beside 2^-1 ... 2^-8) are not all powers of two: there a bias
    built in float32 in a float64 run shows (a power of two times a distance is exact in float32)."""
    a = "alibi-batch"
    return [
        Case("flash: window (8, 0), causal", H=2, mask="lower-right", api=words(NAME, causal=True, window=(8, 0))),
        Case("flash: window (4, 4), L<S", batch=(1,), H=2, L=33, S=47, api=words(NAME, window=(4, 4))),
        Case("flash: window (-1, 3), L>S", batch=(1,), H=2, L=47, S=33, api=words(NAME, window=(-1, 3))),
        Case("flash: window (5, -1), GQA 4/2", H=4, Hkv=2, L=40, api=words(NAME, window=(5, -1))),
        Case("flash: ALiBi (H,), L<S", H=12, L=33, S=47, mod="flash: alibi", api=words(NAME, alibi=True)),
        Case("flash: ALiBi (B, H), causal, L>S", batch=(3,), H=2, L=47, S=33, mask="lower-right",
             mod="flash: alibi", api=words(NAME, causal=True, **{a: True})),
        Case("flash: softcap, ALiBi, window (16, 0), causal, L=97", batch=(1,), H=2, L=97, mask="lower-right",
             mod="flash: softcap, alibi", api=words(NAME, causal=True, window=(16, 0), softcap=True, alibi=True)),
        Case("flash: head dim 128, causal", batch=(1,), H=2, L=80, E=128, mask="lower-right",
             api=words(NAME, causal=True)),
    ]


def heads_third(t: torch.Tensor, case: Case) -> torch.Tensor:
    """(..., H, L, D) -> (B, L, H, D): contiguous, or, for the grid's non-contiguous cases, a view (a
    (B, H, L, D) tensor seen heads third; k, v expanded over the batch; a sliced last dim)."""
    t = t.reshape(-1, *t.shape[-3:])  # the batch dims as one
    if case.layout is None:
        return t.transpose(1, 2).contiguous()
    return (t.contiguous() if case.layout == "transposed" else t).transpose(1, 2)


def keywords(case: Case, args: dict, p: float, device) -> dict:
    """The keywords of FlashAttention's functions that a case sets (the defaults left out)."""
    kw = {}
    if p > 0:
        kw["dropout_p"] = p
    if case.scale is not None:
        kw["softmax_scale"] = float(case.scale)
    if args.get("causal"):
        kw["causal"] = True
    if "window" in args:
        kw["window_size"] = tuple(args["window"])
    if args.get("softcap"):
        kw["softcap"] = mod_cases.CAP
    sl = slopes(case, args)
    if sl is not None:
        kw["alibi_slopes"] = sl.to(device)
    return kw


def split(res) -> tuple:
    """(out, lse or None) from what a FlashAttention-style function returns: out, or (out, lse[, ...])."""
    if isinstance(res, (tuple, list)):
        return res[0], (res[1] if len(res) > 1 else None)
    return res, None


def flat_lse(lse, N: int, H: int, L: int):
    """A returned log-sum-exp as (N, H, L) where it has that many numbers (else as it came, to fail its shape)."""
    if isinstance(lse, torch.Tensor) and lse.numel() == N * H * L:
        return lse.reshape(N, H, L)
    return lse


def sink_keyword(sinks) -> dict:
    """``learnable_sink=``, the (H,) sinks of a sink case (attnlab.judge.sink_cases), where there are any."""
    return {} if sinks is None else {"learnable_sink": sinks}


def call(fn, q, k, v, case: Case, args: dict, p: float, score_mod=None, sinks=None):
    out, lse = split(fn(*(heads_third(t, case) for t in (q, k, v)), **keywords(case, args, p, q.device),
                        **sink_keyword(sinks), return_attn_probs=True))
    if not isinstance(out, torch.Tensor) or out.dim() != 4:
        return out, lse
    N, H, L = out.shape[0], out.shape[2], out.shape[1]
    return out.transpose(1, 2).reshape(*q.shape[:-1], out.shape[-1]), flat_lse(lse, N, H, L)
