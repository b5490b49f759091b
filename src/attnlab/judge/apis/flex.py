"""FlexAttention's ``flex_attention``: masks as functions of the indices, biases as score modifiers.

    flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False) -> out, or (out, lse) with return_lse=True

q, k, v are (B, H, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev), as SDPA's; ``score_mod(score, b, h, q_idx, kv_idx)``
changes each scaled score; ``block_mask`` is a ``torch.nn.attention.flex_attention.BlockMask`` made by
``create_block_mask`` from a mask function ``mask_mod(b, h, q_idx, kv_idx) -> bool``. A row whose every key is
masked gives zeros and a log-sum-exp of -inf. The lse is (B, H, L) float32 (float64 for float64 inputs).

These are already the oracle's terms: the grid's mask functions (``attnlab.masks``: causal, sliding windows,
documents, prefixes...), ``is_causal`` as the upper-left causal mask function, PyTorch's ``CausalBias`` as the
causal mask it names, and its score modifiers (softcap, ALiBi, relative and learnable biases) are handed over
as they are, so the case is the grid's own. What flex_attention has no argument for -- dropout, a mask given as
a tensor -- is skipped.

PyTorch's ``flex_attention`` itself has no backward on the CPU (torch 2.13), so the 2x rule's PyTorch baseline is
F.scaled_dot_product_attention with the equivalent dense mask (or, with a score modifier, PyTorch's plain
operations), as for every other case; ``tests/judge/test_apis.py`` checks that these semantics are
flex_attention's, forwards, on the CPU.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import replace

import torch

from attnlab import masks as M
from attnlab.judge.apis.flash import flat_lse, split
from attnlab.judge.cases import CAUSAL_BIAS, MASK_FAMILIES, Case
from attnlab.judge.facts import Cause

NAME = "flex"
BACKWARD = True


def mask_fn(case: Case):
    """The case's mask as a function ``(b, h, q_idx, kv_idx, L, S) -> bool``; None: no mask."""
    if case.is_causal:
        return M.causal()
    if case.mask == "lower-right" or case.mask == CAUSAL_BIAS[1]:
        return M.causal_lower_right()
    if case.mask == CAUSAL_BIAS[0]:
        return M.causal()
    if case.mask in MASK_FAMILIES:
        return MASK_FAMILIES[case.mask](case.S or case.L)
    return None


def express(c: Case) -> Case | str:
    if c.dropout_p > 0:
        return "flex_attention takes no dropout_p"
    if c.is_causal and c.mask is not None:
        return "is_causal with a mask tensor: flex_attention takes one block_mask (the two as one mask function)"
    if c.mask is not None and mask_fn(c) is None:
        return ("a mask tensor: flex_attention takes masks as a block_mask made from a mask function, and biases "
                "as score_mod=")
    return replace(c, api=NAME)


def extra() -> list[Case]:
    """Masks over several of the block mask's 128-key blocks, some full and some partial, where a kernel that reads
    the blocks wrong shows it."""
    return [
        Case("flex: documents, causal, L=S=300", batch=(1,), H=2, L=300, E=32, mask="document & causal", api=NAME),
        Case("flex: causal, softcap, L=S=257", batch=(1,), H=2, L=257, E=32, mask="causal", mod="softcap", api=NAME),
        Case("flex: sliding window, relative bias, L=S=200", batch=(1,), H=2, L=200, E=32, mask="sliding_window",
             mod="relative_bias", api=NAME),
        # documents that differ by batch row over six blocks of 64: row 0's lists have full blocks row 1's has not,
        # so a kernel that reads one row's block lists for every row shows it (at 61 keys, one block, it could not)
        Case("flex: documents per batch row, causal, blocks of 64, L=S=384", batch=(2,), H=2, L=384, E=32,
             mask="documents per batch row & causal", api=f"{NAME} block=64,64"),
        # the block lists' padding one block each row does not list (create_block_mask pads with every other block,
        # so reading past the counts looks like no mask at all; here it shows as one block too many)
        Case("flex: causal, the lists' padding a block not listed, blocks of 32, L=S=160", batch=(1,), H=2, L=160,
             E=32, mask="causal", api=f"{NAME} block=32,32 filler"),
    ]


BLOCK = 128  # create_block_mask's default BLOCK_SIZE: the tiles a block mask lists as empty, partial or full
CAUSES = (
    Cause("flex-partial-as-full", "partial blocks are taken as full: the block mask's partial blocks "
                                  "(kv_num_blocks / kv_indices) need mask_mod inside them; only full_kv_indices' "
                                  "blocks are wholly seen"),
    Cause("flex-full-only", "only the full blocks are attended: the partial blocks (kv_num_blocks / kv_indices) are "
                            "left out; visit them too, with mask_mod applied inside"),
    Cause("flex-block-size", "the blocks are read at another size than the block mask's BLOCK_SIZE: block index kb "
                             "covers keys kb * BLOCK_SIZE ... (kb + 1) * BLOCK_SIZE - 1"),
    Cause("flex-mod-kv-head", "score_mod is given the key head, h // (H / Hkv): FlexAttention passes the query head "
                              "h, so a per-head bias is read for each query head"),
    Cause("flex-mod-index", "score_mod gets q_idx and kv_idx swapped: it is score_mod(score, b, h, q_idx, kv_idx)"),
    Cause("flex-counts-ignored", "the block lists are read past their counts: entries of kv_indices and "
                                 "full_kv_indices past kv_num_blocks[b, h, i] (full_kv_num_blocks) are visited -- one "
                                 "more (r <= num), or every one, the padding included; only the first "
                                 "kv_num_blocks[b, h, i] entries are blocks, the rest are filler"),
    Cause("flex-full-dropped", "the full blocks are left out: only kv_indices' partial blocks are visited; the "
                               "blocks of full_kv_indices (full_kv_num_blocks of them) are wholly seen, with no "
                               "mask_mod"),
    Cause("flex-counts-crossed", "a block list is read with the other list's count (full_kv_indices up to "
                                 "kv_num_blocks, or kv_indices up to full_kv_num_blocks): read each list up to its "
                                 "own count; past it a list holds filler, the next blocks in order"),
)


def alternatives(case: Case, args: dict):
    """What flex_attention kernels get wrong with a block mask and a score modifier."""
    from attnlab.judge import hypotheses
    from attnlab.judge.explain import Alternative

    masked = mask_fn(case) is not None
    q_block, kv_block = block_size(case) or (BLOCK, BLOCK)
    block = q_block if q_block == kv_block else BLOCK  # the case's square blocks (a block mask's own BLOCK_SIZE)
    if masked:
        yield Alternative("flex-partial-as-full", _blocks(lambda seen: hypotheses.tiles(seen, block, torch.any)))
        yield Alternative("flex-partial-as-full", _blocks(lambda seen: _every_entry(case, seen, 0, partial=False)))
        yield Alternative("flex-full-only", _blocks(lambda seen: hypotheses.tiles(seen, block, torch.all)))
        yield Alternative("flex-full-only", _blocks(lambda seen: _every_entry(case, seen, 0, part="none")))
        for past in (1, None):  # one entry past the count (r <= num), or every entry
            yield Alternative("flex-counts-ignored", _blocks(lambda seen, past=past: _every_entry(case, seen, past)))
        yield Alternative("flex-full-dropped", _blocks(lambda seen: _every_entry(case, seen, 0, full="none")))
        for part, full in (("own", "other"), ("other", "own"), ("other", "other")):  # a list read to the other's count
            yield Alternative("flex-counts-crossed", _blocks(
                lambda seen, p=part, f=full: _every_entry(case, seen, 0, part=p, full=f)))
    for size in (16, 32, 64):  # with no block mask, a kernel walks every 128-key block, read at its own size
        yield Alternative("flex-block-size", _blocks(lambda seen, size=size: seen & _listed(seen, size),
                                                     every=not masked))
    if case.mod is not None:
        yield Alternative("flex-mod-index", lambda kw: {**kw, "score_mod": _swapped(kw["score_mod"])})
    if case.mod is not None and case.gqa:
        G = case.H // case.Hkv
        yield Alternative("flex-mod-kv-head", lambda kw: {**kw, "score_mod": _by_key_head(kw["score_mod"], G)})
    if case.dropout_p == 0:
        yield from hypotheses.padded_keys(case.S or case.L)
        yield from hypotheses.tail_dropped(case.S or case.L)


def _by_key_head(mod, G: int):
    if mod is None:
        raise ValueError("no score_mod")
    return lambda score, b, h, q_idx, kv_idx: mod(score, b, h // G, q_idx, kv_idx)


def _blocks(read, every: bool = False):
    """A change that reads the case's mask (dense, and is_causal) through a block rule ``read(seen (..., L, S))``;
    ``every``: no mask is every key seen (the blocks a kernel walks when it is given no block mask)."""
    def change(kw):
        seen, L, S = kw["attn_mask"], kw["query"].shape[-2], kw["key"].shape[-2]
        if seen is None and every and not kw["is_causal"]:
            seen = torch.ones(L, S, dtype=torch.bool)
        if kw["is_causal"]:
            tril = torch.ones(L, S, dtype=torch.bool).tril()
            seen = tril if seen is None else seen & tril
        if seen is None or seen.dtype != torch.bool:
            raise ValueError("no block mask to read")
        return {**kw, "attn_mask": read(seen), "is_causal": False}
    return change


def _listed(seen: torch.Tensor, size: int) -> torch.Tensor:
    """(..., L, S): keys a kernel visits that reads the block mask's kv_indices (BLOCK-wide) as ``size``-wide."""
    from attnlab.judge import hypotheses

    L, S = seen.shape[-2:]
    listed = hypotheses.tiles(seen, BLOCK, torch.any)[..., ::BLOCK, ::BLOCK]  # (..., nL, nS): the tiles with a key seen
    kb = torch.arange(S) // size  # the tile index a key has in the kernel's reading
    inside = kb < listed.shape[-1]
    got = listed[..., torch.arange(L) // BLOCK, :][..., kb.clamp(max=listed.shape[-1] - 1)]  # (..., L, S)
    return got & inside


def _every_entry(case: Case, seen: torch.Tensor, past: int | None = None, partial: bool = True, part: str = "own",
                 full: str = "own") -> torch.Tensor:
    """(..., L, S): the keys a kernel sees that reads its block lists past their counts -- ``past`` entries more
    (``r <= num``: one; 0: none, the lists as they are), or every entry (None), the padding too: a key of a block so
    named in full_kv_indices, or of one in kv_indices that ``seen`` (the mask function) lets through (``partial``
    False: every key of it, its partial blocks read as full). ``part`` and ``full``: the count kv_indices and
    full_kv_indices are each read to -- "own" (its own), "other" (the other list's) or "none" (the list not read)."""
    L, S = seen.shape[-2:]
    bm = _made_block_mask(case, math.prod(case.batch), "cpu")
    qb, kb = bm.BLOCK_SIZE

    def named(num, idx):
        hit = _named(num, idx, past)  # (..., query blocks, key blocks) -> (..., L, S)
        return hit.repeat_interleave(qb, dim=-2)[..., :L, :].repeat_interleave(kb, dim=-1)[..., :S]

    if bm.full_kv_indices is None:
        if (part, full) != ("own", "own"):
            raise ValueError("no full blocks: no list to leave out, no count to cross")
        whole, listed = torch.zeros_like(seen), named(bm.kv_num_blocks, bm.kv_indices)
    else:
        n_part, n_full = bm.kv_num_blocks, bm.full_kv_num_blocks

        def count(mode, own, other):
            return {"own": own, "other": other, "none": torch.zeros_like(own)}[mode]

        whole = named(count(full, n_full, n_part), bm.full_kv_indices)
        listed = named(count(part, n_part, n_full), bm.kv_indices)
    out = (listed & seen if partial else listed) | whole  # (B, H, L, S)
    return out.reshape(*case.batch, case.H, L, S) if case.batch else out.reshape(case.H, L, S)


def _named(num: torch.Tensor, idx: torch.Tensor, past: int | None = 0) -> torch.Tensor:
    """(..., query blocks, key blocks) bool: the key blocks a block list names in its first ``num`` entries (``past``
    entries more; None: every entry, its padding too). ``idx`` (..., query blocks, key blocks), ``num`` (..., query
    blocks): a BlockMask's kv_indices and kv_num_blocks (or full_...)."""
    n = idx.shape[-1] if past is None else num.long().unsqueeze(-1) + past
    read = torch.arange(idx.shape[-1]) < n
    hit = torch.zeros(*idx.shape[:-1], idx.shape[-1] + 1, dtype=torch.bool)  # (the last column: entries not read)
    return hit.scatter_(-1, torch.where(read, idx.long(), idx.shape[-1]), True)[..., :-1]


def _swapped(mod):
    if mod is None:
        raise ValueError("no score_mod")
    return lambda score, b, h, q_idx, kv_idx: mod(score, b, h, kv_idx, q_idx)


def block_size(case: Case) -> tuple[int, int] | None:
    """The case's block mask's BLOCK_SIZE, (q block, kv block), where its API sets one (None: create_block_mask's
    default, :data:`BLOCK`)."""
    from attnlab.judge.apis import parse

    size = parse(case.api)[1].get("block") if case.api else None
    return tuple(size) if size else None


def block_mask(case: Case, B: int, device):
    """torch's BlockMask for the case's mask function (None without a mask): a copy of its own for each call, its
    tensors cloned, so that a function that writes into the one it was given changes no other call's."""
    made = _made_block_mask(case, B, str(device))
    if made is None:
        return None
    mine = copy.copy(made)
    for name in getattr(type(made), "_TENSOR_ATTRS", ()):
        t = getattr(made, name, None)
        if isinstance(t, torch.Tensor):
            setattr(mine, name, t.clone())
    return mine


@functools.lru_cache(maxsize=16)
def _made_block_mask(case: Case, B: int, device: str):
    """create_block_mask for the case, made once (it evaluates the mask function over every query-key pair: 2 ms a
    call, three calls a case and the probes' besides) and copied for each call (:func:`block_mask`)."""
    fn = mask_fn(case)
    if fn is None:
        return None
    from torch.nn.attention.flex_attention import create_block_mask  # imported only here: it costs seconds

    L, S = case.L, case.S or case.L
    size = block_size(case)
    kw = {"BLOCK_SIZE": size} if size else {}
    made = create_block_mask(lambda b, h, i, j: fn(b, h, i, j, L, S), B, case.H, L, S, device=device, **kw)
    from attnlab.judge.apis import parse

    return _filler(made) if parse(case.api)[1].get("filler") else made


def _filler(bm):
    """The block mask with the padding past each row's counts set to one block the row does not list (its last;
    where it lists every block, its list's first entry): create_block_mask pads each list with every other block in
    order, so a kernel that reads past the counts sees every key -- no mask, to the eye -- where here it sees one
    block more."""
    from torch.nn.attention.flex_attention import BlockMask

    every = _named(bm.kv_num_blocks, bm.kv_indices)
    if bm.full_kv_indices is not None:
        every = every | _named(bm.full_kv_num_blocks, bm.full_kv_indices)
    spare = torch.where(~every, torch.arange(every.shape[-1]), -1).amax(dim=-1, keepdim=True)  # -1: none

    def filled(num, idx):
        live = torch.arange(idx.shape[-1]) < num.unsqueeze(-1).long()
        return torch.where(live, idx, torch.where(spare >= 0, spare, idx[..., :1]).to(idx.dtype)).contiguous()

    full = (bm.full_kv_num_blocks, filled(bm.full_kv_num_blocks, bm.full_kv_indices)) \
        if bm.full_kv_indices is not None else (None, None)
    return BlockMask.from_kv_blocks(bm.kv_num_blocks, filled(bm.kv_num_blocks, bm.kv_indices), *full,
                                    BLOCK_SIZE=bm.BLOCK_SIZE, mask_mod=bm.mask_mod, seq_lengths=bm.seq_lengths)


def call(fn, q, k, v, case: Case, args: dict, p: float, score_mod=None):
    B = math.prod(case.batch)
    q4, k4, v4 = (t.reshape(B, *t.shape[-3:]) for t in (q, k, v))  # the batch dims as one, (B, H, L, E)
    kw: dict = {"return_lse": True}
    if score_mod is not None:
        kw["score_mod"] = score_mod
    bm = block_mask(case, B, q.device)
    if bm is not None:
        kw["block_mask"] = bm
    if case.scale is not None:
        kw["scale"] = float(case.scale)
    if case.gqa:
        kw["enable_gqa"] = True
    out, lse = split(fn(q4, k4, v4, **kw))
    if not isinstance(out, torch.Tensor) or out.dim() != 4:
        return out, lse
    return out.reshape(*q.shape[:-1], out.shape[-1]), flat_lse(lse, B, case.H, case.L)
