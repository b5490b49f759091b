"""The sink cases of ``attnlab verify``: gpt-oss's attention sinks, for the functions that take them.

A sink is one logit per query head that joins each row's softmax as one more term, whose weight goes to no value:
``w_ij = exp(s_ij) / (sum_j exp(s_ij) + exp(sink_h))``, ``out = w v``, the log-sum-exp
``log(sum_j exp(s_ij) + exp(sink_h))``; a row that sees no key gives the sink all its weight (output 0, lse the
sink). The sdpa face takes them as ``sinks=`` (H,), FlashAttention's APIs as ``learnable_sink=`` (H,).

A function is given these cases only where its signature names the keyword (:func:`takes_sinks`; ``**kwargs`` does
not count: a wrapper that forwards everything to a function without sinks would fail them all), and it still gets
every ordinary case, without sinks. Each case says how its sinks sit against the row's scores (:data:`KINDS`,
:func:`values`): drawn around the rows' own log-sum-exp (the sink takes some of each row's weight, a different share
per head), far above it (most of the weight on the sink), a hundred above it (``huge``: exp(sink - the row's max
score) past float32's range, where a kernel that leaves the sink out of its max overflows), far below (the sink
negligible: a function that ignores it passes there), zero, or spread evenly over the heads (the probes, which read
each head's sink from its weight). The cases put them with causal masks and windows, rows with no key, long rows
(several of a tiled kernel's key tiles), GQA, views, large logits, soft-cap and ALiBi, packed sequences and paged
caches, in every dtype of the run.

PyTorch's own answer, the rule's "2 x PyTorch's error", is :func:`pytorch`: ``F.scaled_dot_product_attention`` on the
problem a sink is -- one more key and value of zeros whose score is the sink, added as a float mask -- in the case's
dtype; its float64 answer checks the oracle's sinks (:func:`attnlab.judge.oracle.reference`).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace

import torch
import torch.nn.functional as F

from attnlab.judge.apis import Adapted, words
from attnlab.judge.cases import LARGE, Case

KINDS = ("random", "large", "small", "zero", "spread", "huge")
KEYWORDS = {"sdpa": "sinks", "flash-attn": "learnable_sink", "flash-attn-varlen": "learnable_sink",
            "paged-decode": "learnable_sink"}  # the APIs that take sinks, and the keyword each takes them by
SPREAD = 1.5  # the probes' sinks run from the rows' log-sum-exp minus this to plus this, head by head
FAR = 60.0  # a "small" sink sits this far below the rows' log-sum-exp: exp(-60) is below every dtype's rounding
HUGE = 100.0  # a "huge" one this far above it: exp(sink - the row's max score) overflows float32 (past ~88)


def takes_sinks(fn) -> bool:
    """Whether a function's signature names ``sinks`` or ``learnable_sink`` (a function written to another API, as
    the judge wraps it: the function inside). ``**kwargs`` alone does not count."""
    fn = fn.fn if isinstance(fn, Adapted) else fn
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return any(name in params and params[name].kind is not inspect.Parameter.VAR_KEYWORD
               for name in set(KEYWORDS.values()))


def values(case: Case, q: torch.Tensor, k: torch.Tensor, seed: int) -> torch.Tensor | None:
    """The case's sinks, (H,) float32 on the CPU (None for a case without): placed against each head's mean row
    log-sum-exp of the unmasked scores of ``q`` (..., H, L, E) and ``k`` (..., Hkv, S, E), as :data:`KINDS` says,
    drawn from ``seed``."""
    if case.sinks is None:
        return None
    H, E = case.H, q.shape[-1]
    q64 = q.detach().double().cpu().reshape(-1, H, q.shape[-2], E)
    k64 = k.detach().double().cpu().reshape(q64.shape[0], -1, k.shape[-2], E)
    k64 = k64.repeat_interleave(H // k64.shape[1], dim=1)
    scale = 1.0 / math.sqrt(E) if case.scale is None else float(case.scale)
    if q64.numel() and k64.shape[-2]:
        center = torch.logsumexp(q64 @ k64.transpose(-2, -1) * scale, dim=-1).mean(dim=(0, 2))
    else:
        center = torch.zeros(H, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed + 104_729)
    shift = {"random": lambda: 1.5 * torch.randn(H, generator=g, dtype=torch.float64),
             "large": lambda: 4.0 + torch.rand(H, generator=g, dtype=torch.float64),
             "small": lambda: -FAR - torch.rand(H, generator=g, dtype=torch.float64),
             "huge": lambda: HUGE + torch.rand(H, generator=g, dtype=torch.float64),
             "spread": lambda: torch.linspace(-SPREAD, SPREAD, H, dtype=torch.float64)}
    if case.sinks == "zero":
        return torch.zeros(H)
    if case.sinks not in shift:
        raise ValueError(f"case {case.name!r}: sinks={case.sinks!r}; choose from {', '.join(KINDS)}")
    return (center + shift[case.sinks]()).float()


def pytorch(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
            sinks=None, score_mod=None):
    """PyTorch's own attention with sinks, (..., H, L, E) inputs: ``F.scaled_dot_product_attention`` with one more
    key and value of zeros, whose score q . 0 is given the row's sink by a float mask (``is_causal`` and the case's
    mask folded into that mask, the sink's column always seen). Differentiable in ``sinks`` through the mask. With
    a ``score_mod`` (an API's soft-cap or ALiBi), PyTorch's plain operations: the modified scores, the sink's
    column after them, softmax, the sink's column dropped."""
    L, S, H = query.shape[-2], key.shape[-2], query.shape[-3]
    lead = query.shape[:-3]
    if score_mod is not None:
        return _plain(query, key, value, attn_mask, is_causal, scale, enable_gqa, sinks, score_mod)
    bias = torch.zeros(L, S, dtype=query.dtype, device=query.device)
    if is_causal:
        bias = bias.masked_fill(~torch.ones(L, S, dtype=torch.bool, device=query.device).tril(), -math.inf)
    if attn_mask is not None:
        bias = bias + (attn_mask.to(query.dtype) if attn_mask.is_floating_point() else
                       torch.zeros((), dtype=query.dtype, device=query.device).masked_fill(~attn_mask, -math.inf))
    bias = bias.expand(*lead, H, L, S)
    column = sinks.to(query.dtype).view(H, 1, 1).expand(*lead, H, L, 1)
    key, value = F.pad(key, (0, 0, 0, 1)), F.pad(value, (0, 0, 0, 1))
    return F.scaled_dot_product_attention(query, key, value, attn_mask=torch.cat([bias, column], dim=-1),
                                          dropout_p=dropout_p, scale=None if scale is None else float(scale),
                                          enable_gqa=enable_gqa)


def _plain(query, key, value, attn_mask, is_causal, scale, enable_gqa, sinks, score_mod):
    L, S, H, E = query.shape[-2], key.shape[-2], query.shape[-3], query.shape[-1]
    q = query.reshape(-1, H, L, E)
    k, v = (t.reshape(q.shape[0], -1, S, t.shape[-1]) for t in (key, value))
    if enable_gqa and k.shape[1] != H:
        k, v = (t.repeat_interleave(H // k.shape[1], dim=1) for t in (k, v))
    s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(E) if scale is None else float(scale))
    N = q.shape[0]
    b, h, i, j = (torch.arange(n, device=q.device).view(*(n if d == x else 1 for d in range(4)))
                  for x, n in enumerate((N, H, L, S)))
    s = score_mod(s, b, h, i, j)
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool, device=q.device).tril(), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.to(s.dtype)
    s = torch.cat([s, sinks.to(s.dtype).view(1, H, 1, 1).expand(N, H, L, 1)], dim=-1)
    out = torch.softmax(s, dim=-1)[..., :-1] @ v
    return out.reshape(*query.shape[:-1], v.shape[-1])


def cases(api: str) -> list[Case]:
    """The sink cases of an API (none for an API without sinks), in no dtype yet."""
    return {"sdpa": _sdpa, "flash-attn": _flash, "flash-attn-varlen": _varlen, "paged-decode": _paged}.get(
        api, list)()


def _sdpa() -> list[Case]:
    def c(name, sinks="random", **kw):
        return Case(f"sinks: {name}", sinks=sinks, **kw)

    return [
        c("random"),
        c("large, causal", "large", is_causal=True),
        c("small, bool mask", "small", mask="bool"),
        c("zero, L<S", "zero", batch=(1,), H=2, L=33, S=47),
        c("rows with every key masked", mask="dead-rows"),
        c("L=S=300, causal", batch=(1,), H=2, L=300, is_causal=True),
        c("GQA 6/2, causal", batch=(1,), H=6, Hkv=2, L=40, is_causal=True),
        c("sliding window", batch=(2,), H=2, L=61, mask="sliding_window"),
        c("float mask, scale=0.3", mask="float", scale=0.3),
        c("large logits, causal", is_causal=True, magnitude=LARGE),
        c("transposed views, large", "large", layout="transposed"),
        c("huge: 100 above the scores, causal", "huge", batch=(1,), H=2, L=24, is_causal=True),
        c("causal, L>S", batch=(1,), H=2, L=40, S=24, is_causal=True),
    ]


def _flash() -> list[Case]:
    A = "flash-attn"

    def c(name, sinks="random", **kw):
        return Case(f"flash sinks: {name}", sinks=sinks, **kw)

    return [
        c("random", api=words(A)),
        c("causal, large", "large", mask="lower-right", api=words(A, causal=True)),
        c("causal, L>S: rows that see no key", batch=(1,), H=2, L=47, S=33, mask="lower-right",
          api=words(A, causal=True)),
        c("window (8, 0), causal", H=2, mask="lower-right", api=words(A, causal=True, window=(8, 0))),
        c("window (4, 4), L<S, small", "small", batch=(1,), H=2, L=33, S=47, api=words(A, window=(4, 4))),
        c("GQA 6/2, causal", batch=(1,), H=6, Hkv=2, L=40, mask="lower-right", api=words(A, causal=True)),
        c("zero", "zero", api=words(A)),
        c("L=S=300, causal", batch=(1,), H=2, L=300, mask="lower-right", api=words(A, causal=True)),
        c("ALiBi (H,), causal", H=4, L=24, mask="lower-right", mod="flash: alibi", api=words(A, causal=True,
                                                                                         alibi=True)),
        c("softcap, L<S", batch=(1,), H=2, L=20, S=30, mod="flash: softcap", api=words(A, softcap=True)),
        c("huge: 100 above the scores, causal", "huge", batch=(1,), H=2, L=24, mask="lower-right",
          api=words(A, causal=True)),
    ]


def _varlen() -> list[Case]:
    from attnlab.judge.apis import varlen as V

    def c(name, lq, lk, sinks="random", **kw):
        return replace(V.case(f"varlen sinks: {name}", lq, lk, **{"H": 2, **kw}), sinks=sinks)

    return [
        c("4 sequences 5, 17, 1, 33", (5, 17, 1, 33), (5, 17, 1, 33)),
        c("causal, queries longer: rows that see no key", (9, 4), (5, 4), "large", causal=True),
        c("a sequence with queries and no keys", (3, 5, 4), (6, 0, 7)),
        c("GQA 4/2, window (6, 0), causal", (20, 13), (20, 13), causal=True, window=(6, 0), H=4, Hkv=2),
        c("3 sequences, small", (7, 30, 15), (7, 30, 15), "small"),
        c("two sequences of 150 and 180, causal", (150, 180), (150, 180), causal=True),
        c("window (4, 4), 3 sequences", (9, 12, 7), (9, 12, 7), window=(4, 4)),
        c("GQA 4/2, 3 sequences", (7, 12, 5), (7, 12, 5), H=4, Hkv=2),
        c("huge: 100 above the scores", (7, 12), (7, 12), "huge"),
    ]


def _paged() -> list[Case]:
    from attnlab.judge.apis import paged as P

    def c(name, lens, block, sinks="random", **kw):
        return replace(P.case(f"paged sinks: {name}", lens, block, **{"H": 2, **kw}), sinks=sinks)

    return [
        c("3 sequences of 1, 37, 64 keys, pages of 16", (1, 37, 64), 16, H=4),
        c("an empty cache", (0, 20), 8),
        c("4 queries, causal, large", (20, 37), 16, "large", L=4, causal=True),
        c("append 2, GQA 4/2, causal", (6, 13), 4, L=2, new=2, causal=True, H=4, Hkv=2),
        c("window (5, -1), small", (30, 12), 8, "small", window=(5, -1)),
        c("a long cache, pages of 64", (300, 130), 64),
    ]
