"""FlashAttention's ``flash_attn_varlen_func``: sequences of different lengths packed end to end.

    flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False)

q is (total_q, H, D) and k, v (total_k, Hkv, D): sequence b's queries are rows ``cu_seqlens_q[b] ..
cu_seqlens_q[b + 1] - 1`` (int32 cumulative lengths, starting at 0), its keys likewise. Each sequence is a
``flash_attn_func`` problem of its own (bottom-right causal, windows, softcap: :mod:`.flash`), so in the
oracle's terms a varlen call is one batch of total_q queries and total_k keys under a block-diagonal mask:
query rows of sequence b see only sequence b's keys, as :func:`attnlab.judge.apis.flash.keys_seen` says.
The log-sum-exp comes back as (H, total_q) float32 (FlashAttention 2); the older (B, H, max_seqlen_q) padded
form is read too.
"""

from __future__ import annotations

import torch

from attnlab.judge.apis import flash, words
from attnlab.judge.cases import Case

NAME = "flash-attn-varlen"
BACKWARD = True


def lengths(case: Case, args: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    lq = tuple(args["q"]) if isinstance(args["q"], tuple) else (args["q"],)
    lk = tuple(args["k"]) if isinstance(args["k"], tuple) else (args["k"],)
    return lq, lk


def visible(case: Case, args: dict) -> torch.Tensor:
    """(total_q, total_k) bool: each sequence's queries see its own keys, under flash_attn_func's rules."""
    lq, lk = lengths(case, args)
    seen = torch.zeros(sum(lq), sum(lk), dtype=torch.bool)
    i0 = j0 = 0
    for L, S in zip(lq, lk, strict=True):
        block = flash.keys_seen(L, S, bool(args.get("causal")), tuple(args.get("window", (-1, -1))))
        seen[i0:i0 + L, j0:j0 + S] = True if block is None else block
        i0, j0 = i0 + L, j0 + S
    return seen


def score_mod(case: Case, args: dict):
    return flash.score_mod(case, args)  # softcap only: ALiBi's distance is per sequence (not among the cases)


def case(name: str, lq, lk, causal=False, window=None, softcap=False, **kw) -> Case:
    """A varlen case: one batch of sum(lq) queries and sum(lk) keys."""
    L, S = sum(lq), sum(lk)
    return Case(name, batch=(1,), L=L, S=S if S != L else None, mask="varlen", mod="flash: softcap" if softcap
                else None, api=words(NAME, q=tuple(lq), k=tuple(lk), causal=causal, window=window, softcap=softcap),
                **kw)


def express(c: Case) -> str:
    return "the grid's cases hold one sequence length per batch; flash-attn-varlen runs its own packed cases"


def extra() -> list[Case]:
    return [
        case("varlen: 4 sequences 5, 17, 1, 33", (5, 17, 1, 33), (5, 17, 1, 33), H=2),
        case("varlen: causal, 5, 17, 1, 33", (5, 17, 1, 33), (5, 17, 1, 33), causal=True, H=2),
        case("varlen: causal, keys longer (chunked prefill)", (3, 1, 8), (10, 20, 8), causal=True, H=2),
        case("varlen: causal, queries longer: rows that see no key", (9, 4), (5, 4), causal=True, H=2),
        case("varlen: an empty sequence", (4, 0, 9), (4, 0, 9), causal=True, H=2),
        case("varlen: GQA 4/2, window (6, 0), causal", (20, 13), (20, 13), causal=True, window=(6, 0), H=4, Hkv=2),
        case("varlen: softcap, causal", (16, 40), (16, 40), causal=True, softcap=True, H=2),
        case("varlen: scale=0.3, one query a sequence", (1, 1, 1), (30, 7, 64), H=2, scale=0.3),
        case("varlen: dropout 0.2", (16, 40), (16, 40), H=2, dropout_p=0.2),
    ]


def _cu(lens, device) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)


def packed(t: torch.Tensor, case: Case) -> torch.Tensor:
    """(1, H, T, D) -> (T, H, D), contiguous or, for the grid's non-contiguous cases, a view."""
    return flash.heads_third(t, case)[0]


def call(fn, q, k, v, case: Case, args: dict, p: float, score_mod=None):
    lq, lk = lengths(case, args)
    kw = flash.keywords(case, args, p, q.device)
    out, lse = flash.split(fn(*(packed(t, case) for t in (q, k, v)), _cu(lq, q.device), _cu(lk, q.device),
                              max(lq), max(lk), **kw, return_attn_probs=True))
    if not isinstance(out, torch.Tensor) or out.dim() != 3:
        return out, lse
    H, T = out.shape[1], out.shape[0]
    if isinstance(lse, torch.Tensor) and lse.dim() == 3 and lse.shape[0] == len(lq):  # (B, H, max_seqlen_q)
        lse = torch.cat([lse[b, :, :n] for b, n in enumerate(lq)], dim=-1)
    return out.transpose(0, 1)[None], flash.flat_lse(lse, 1, H, T)
