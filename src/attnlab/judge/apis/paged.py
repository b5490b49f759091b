"""Decode over a paged KV cache, as FlashAttention's ``flash_attn_with_kvcache`` takes it (and vLLM-style kernels).

    fn(q, k_cache, v_cache, cache_seqlens=..., block_table=..., softmax_scale=None, softcap=0.0,
       return_softmax_lse=True) -> (out, softmax_lse)

q is (B, 1, H, D): one new query per sequence. The keys live in pages: ``k_cache`` and ``v_cache`` are
(num_blocks, block_size, Hkv, D), and sequence b's key number j is in page ``block_table[b, j // block_size]``
at row ``j % block_size``; only its first ``cache_seqlens[b]`` keys count (int32, (B,)). The output is
(B, 1, H, D) (or (B, H, D)), the log-sum-exp float32 (B, H, 1) (or (B, H)).

In the oracle's terms that is plain attention of B queries over the keys gathered back in order, (B, Hkv, S, D),
with a padding mask ``j < cache_seqlens[b]`` (a sequence whose cache is empty sees no key: zeros, -inf). The
judge builds the pages itself: each case shuffles the pages at random (fixed by the case's name), fills pages
no table points to with large numbers, and leaves each sequence's last page partly past its length, so a
kernel that reads the wrong page, ignores ``block_table`` or ``cache_seqlens``, or attends past the end fails.
There is no backward: the output and the log-sum-exp are judged.
"""

from __future__ import annotations

import math
import zlib

import torch

from attnlab.judge.apis import flash, words
from attnlab.judge.cases import LARGE, Case

NAME = "paged-decode"
BACKWARD = False
SPARE = 3  # pages no table points to
GARBAGE = 1e3  # what those pages hold


def seqlens(case: Case, args: dict) -> tuple[int, ...]:
    s = args["seqlens"]
    return tuple(s) if isinstance(s, tuple) else (s,)


def visible(case: Case, args: dict) -> torch.Tensor:
    """(B, 1, 1, S) bool: sequence b's query sees its first cache_seqlens[b] keys."""
    lens = torch.tensor(seqlens(case, args))
    return (torch.arange(case.S)[None] < lens[:, None]).view(len(lens), 1, 1, case.S)


def score_mod(case: Case, args: dict):
    return flash.score_mod(case, args)


def case(name: str, lens, block: int, softcap=False, **kw) -> Case:
    """A decode case: B = len(lens) sequences, keys gathered to S = block * (pages of the longest + 1)."""
    S = block * (math.ceil(max(lens) / block) + 1)
    return Case(name, batch=(len(lens),), L=1, S=S, mask="padding", mod="flash: softcap" if softcap else None,
                api=words(NAME, seqlens=tuple(lens), block=block, softcap=softcap), **kw)


def express(c: Case) -> Case | str:
    """The grid's plain decoding step (one query, no mask) as a paged call; every other case is not a decode."""
    if c.L != 1 or c.mask is not None or c.mod or c.dropout_p or c.is_causal or (c.Ev or c.E) != c.E:
        return "not a decoding step (one query per sequence over a cache, no mask): paged-decode runs its own cases"
    S = c.S or c.L
    return case(c.name, (S,) * math.prod(c.batch), 16, H=c.H, Hkv=c.Hkv, E=c.E, scale=c.scale, dtype=c.dtype,
                layout=c.layout, magnitude=c.magnitude)


def extra() -> list[Case]:
    return [
        case("paged: 3 sequences of 1, 37, 64 keys, pages of 16", (1, 37, 64), 16, H=4),
        case("paged: GQA 8/2, pages of 1", (5, 9), 1, H=8, Hkv=2),
        case("paged: an empty cache", (0, 20), 8, H=2),
        case("paged: scale=0.3, head dim 64, pages of 32", (100, 33), 32, H=2, E=64, scale=0.3),
        case("paged: softcap", (30, 50), 16, H=2, softcap=True),
        case("paged: large logits", (40, 17), 16, H=2, magnitude=LARGE),
    ]


def pages(k: torch.Tensor, case: Case, block: int):
    """(B, Hkv, S, D) keys -> (pages (num_blocks, block, Hkv, D), block_table (B, S // block) int32)."""
    B, Hkv, S, D = k.shape
    n = S // block
    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    order = torch.randperm(B * n + SPARE, generator=g)
    table = order[:B * n].view(B, n)
    cache = (torch.randn(B * n + SPARE, block, Hkv, D, generator=g) * GARBAGE).to(k.device, k.dtype)
    cache[table.reshape(-1).to(k.device)] = k.transpose(1, 2).reshape(B * n, block, Hkv, D)
    return cache, table.to(device=k.device, dtype=torch.int32)


def call(fn, q, k, v, case: Case, args: dict, p: float, score_mod=None):
    block = args["block"]
    with torch.no_grad():
        k_cache, table = pages(k.detach(), case, block)
        v_cache, _ = pages(v.detach(), case, block)
        kw = {key: val for key, val in flash.keywords(case, args, p, q.device).items() if key != "dropout_p"}
        lens = torch.tensor(seqlens(case, args), dtype=torch.int32, device=q.device)
        out, lse = flash.split(fn(flash.heads_third(q.detach(), case), k_cache, v_cache, cache_seqlens=lens,
                                  block_table=table, **kw, return_softmax_lse=True))
    if not isinstance(out, torch.Tensor) or out.dim() not in (3, 4):
        return out, lse
    B, H = q.shape[0], q.shape[1]
    out = out.reshape(B, H, 1, out.shape[-1]) if out.dim() == 3 else out.transpose(1, 2)
    return out, flash.flat_lse(lse, B, H, 1)
