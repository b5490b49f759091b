"""FlashAttention's ``flash_attn_varlen_func``: sequences of different lengths packed end to end.

    flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False)

q is (total_q, H, D) and k, v (total_k, Hkv, D): sequence b's queries are rows ``cu_seqlens_q[b] ..
cu_seqlens_q[b + 1] - 1`` (int32 cumulative lengths, starting at 0), its keys likewise. Each sequence is a
``flash_attn_func`` problem of its own (bottom-right causal, windows, softcap: :mod:`.flash`), so in the
oracle's terms a varlen call is one batch of total_q queries and total_k keys under a block-diagonal mask:
query rows of sequence b see only sequence b's keys, query i of the sequence at key position
``i + S_b - L_b`` of its own keys (S_b, L_b its key and query counts). ``max_seqlen_q`` and ``max_seqlen_k``
only bound the lengths. The log-sum-exp comes back as (H, total_q) float32, packed like q (the first FlashAttention 2
releases padded it per sequence, (B, H, max_seqlen_q): that is a line of its own).

Where a kernel gets the packing wrong, its output is still attention under some other block mask: a sequence
whose keys start a row early, one that reads max_seqlen_k keys, a diagonal placed on the packed rows. Each is
a :class:`Placement` of the sequences, turned into a mask by the one function that makes the right one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import torch

from attnlab.judge import mod_cases
from attnlab.judge.apis import flash, telling, tied, words
from attnlab.judge.cases import LARGE, Case
from attnlab.judge.facts import Cause

NAME = "flash-attn-varlen"
BACKWARD = True
_WHERE = "its keys are rows cu_seqlens_k[b] ... cu_seqlens_k[b + 1] - 1"
CAUSES = (
    Cause('varlen-packing-ignored', "the sequences' packing is ignored: queries attend the keys of other sequences "
                                    '(one mask over the packed rows); sequence b attends only its own keys, rows '
                                    'cu_seqlens_k[b] ... cu_seqlens_k[b + 1] - 1'),
    Cause('varlen-keys-early', "each sequence's keys are read one row early (cu_seqlens_k off by one): sequence b "
                               'attends the last key of the sequence before it and not its own last key; ' + _WHERE),
    Cause('varlen-keys-late', "each sequence's keys are read one row late (cu_seqlens_k off by one): sequence b "
                              "skips its first key and attends the next sequence's first key; " + _WHERE),
    Cause('varlen-keys-overrun', "each sequence attends one key past its end, the next sequence's first (is "
                                 'cu_seqlens_k[b + 1] taken as its last row?); ' + _WHERE),
    Cause('varlen-queries-shifted', 'query rows are given to the wrong sequence at its boundaries (cu_seqlens_q off '
                                    "by one): a sequence's first or last output row is computed with the sequence "
                                    "beside it; sequence b's queries are rows cu_seqlens_q[b] ... cu_seqlens_q[b + 1] "
                                    '- 1'),
    Cause('varlen-max-seqlen-k', 'every sequence is taken as max_seqlen_k keys long: sequence b reads keys past its '
                                 'end, into the sequences after it; ' + _WHERE + ' (max_seqlen_k only bounds them)'),
    Cause('varlen-diagonal-from-max', 'the causal diagonal (and window) is placed by max_seqlen_q or max_seqlen_k, '
                                      "not by the sequence's own lengths: query i of sequence b sits at key position "
                                      'i + S_b - L_b'),
    Cause('varlen-lse-padded', 'the log-sum-exp comes back padded per sequence, (batch, H, max_seqlen_q), as the '
                               "first FlashAttention 2 releases returned it: flash_attn_varlen_func's is packed like "
                               'q, (H, total_q)'),
    Cause('varlen-top-left', 'causal= (or window_size=) is aligned top-left in each sequence (query i sees keys j '
                             "<= i): FlashAttention aligns it bottom-right in each sequence, query i sees its keys "
                             'j <= i + S_b - L_b (S_b, L_b: the sequence\'s key and query counts)'),
    Cause('varlen-causal-packed', 'causal= (or window_size=) is aligned on the packed rows, not within each '
                                  'sequence: query row r sees key rows c <= r (or c <= r + total_k - total_q); query '
                                  'i of sequence b sees its keys j <= i + S_b - L_b'),
)


class Placement(NamedTuple):
    """Where a kernel puts one sequence: its query rows from ``q0`` (``L`` of them), its key rows from ``k0``
    (``S``), query i at key position ``i + offset`` of them; ``wrap``: key rows below 0 read from the other end
    (an index that wraps)."""

    q0: int
    L: int
    k0: int
    S: int
    offset: int
    wrap: bool = False


def lengths(case: Case, args: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    lq = tuple(args["q"]) if isinstance(args["q"], tuple) else (args["q"],)
    lk = tuple(args["k"]) if isinstance(args["k"], tuple) else (args["k"],)
    return lq, lk


def _starts(lens) -> list[int]:
    return [sum(lens[:b]) for b in range(len(lens))]


def placements(case: Case, args: dict) -> list[Placement]:
    """Each sequence where flash_attn_varlen_func puts it."""
    lq, lk = lengths(case, args)
    return [Placement(q0, L, k0, S, S - L) for q0, L, k0, S in zip(_starts(lq), lq, _starts(lk), lk, strict=True)]


def mask(case: Case, args: dict, seqs, base: torch.Tensor | None = None) -> torch.Tensor:
    """(total_q, total_k) bool: each placed sequence's query rows see its key rows under flash_attn_func's rules;
    rows no placement covers keep ``base``'s (else see nothing). Rows and keys outside the packing are left out
    (or, for a placement that wraps, read from the other end)."""
    lq, lk = lengths(case, args)
    Tq, Tk = sum(lq), sum(lk)
    seen = torch.zeros(Tq, Tk, dtype=torch.bool) if base is None else base.clone()
    causal, window = bool(args.get("causal")), tuple(args.get("window", (-1, -1)))
    for s in seqs:
        r, c = torch.arange(s.q0, s.q0 + s.L), torch.arange(s.k0, s.k0 + s.S)
        if s.wrap:
            c = c % max(Tk, 1)
        ir, ic = (r >= 0) & (r < Tq), (c >= 0) & (c < Tk)
        block = flash.keys_seen_at(s.L, s.S, s.offset, causal, window)
        block = torch.ones(s.L, s.S, dtype=torch.bool) if block is None else block
        seen[r[ir]] = False
        seen[r[ir][:, None], c[ic][None, :]] = block[ir][:, ic]
    return seen


def visible(case: Case, args: dict) -> torch.Tensor:
    """(total_q, total_k) bool: each sequence's queries see its own keys, under flash_attn_func's rules."""
    return mask(case, args, placements(case, args))


def score_mod(case: Case, args: dict, sl: torch.Tensor | None = None):
    """softcap, then ALiBi with each sequence's own distance: query i of sequence b at key position i + S_b - L_b
    of that sequence, key j at j (the packed rows' positions within their sequence), and (B, H) slopes by the
    query's sequence. ``sl``: other slopes than the case's (an alternative's)."""
    sl = flash.slopes(case, args) if sl is None else sl
    if sl is None:
        return flash.score_mod(case, args)
    from attnlab.judge import mod_cases
    from attnlab.kernels import mods

    qpos, kpos = torch.zeros(sum(lengths(case, args)[0])), torch.zeros(sum(lengths(case, args)[1]))
    seq = torch.zeros(len(qpos), dtype=torch.long)  # each query row's sequence
    for b, s in enumerate(placements(case, args)):
        qpos[s.q0:s.q0 + s.L] = torch.arange(s.L) + s.offset
        kpos[s.k0:s.k0 + s.S] = torch.arange(s.S)
        seq[s.q0:s.q0 + s.L] = b
    cap = mod_cases.CAP if args.get("softcap") else None
    rows = sl if sl.dim() == 2 else sl[None]

    def fn(score, b, h, q_idx, kv_idx):
        if cap is not None:
            score = torch.tanh(score / cap) * cap
        d = (qpos.to(score.device)[q_idx] - kpos.to(score.device)[kv_idx]).abs()
        row = seq.to(score.device)[q_idx] if sl.dim() == 2 else torch.zeros_like(q_idx)
        return score - rows.to(score)[row, h] * d.to(score.dtype)

    return mods.Mod.from_fn(fn, words("varlen", softcap=cap is not None, alibi=True))


EDGES = ("left", "clamped", "empty", "wrapped")  # what a kernel does where a sequence moved off the packing's ends


def _mover(change, edge: str, Tq: int, Tk: int):
    """placements -> the placements ``change`` moves them to. Where one leaves the packing, kernels differ, so
    ``edge`` says how: "left" -- held to nothing there (it keeps what its neighbours leave); "clamped" -- a slice
    cut at the end, the diagonal placed by the slice's own lengths; "empty" -- a slice that starts below 0 is
    empty (Python's ``t[-1:n]``); "wrapped" -- a key index below 0 reads from the other end."""
    def move(seqs):
        out = []
        for s in seqs:
            m = change(s)
            q_in = m.L == 0 or 0 <= m.q0 <= m.q0 + m.L <= Tq
            k_in = m.S == 0 or 0 <= m.k0 <= m.k0 + m.S <= Tk
            if q_in and k_in:
                out.append(m)
            elif edge == "clamped":
                q0, k0 = max(m.q0, 0), max(m.k0, 0)
                L, S = max(min(m.q0 + m.L, Tq) - q0, 0), max(min(m.k0 + m.S, Tk) - k0, 0)
                out.append(Placement(q0, L, k0, S, S - L))
            elif edge == "empty" and (m.q0 < 0 or m.k0 < 0):
                out.append(m._replace(L=0) if m.q0 < 0 else m._replace(S=0))
            elif edge == "wrapped" and q_in and m.k0 < 0:
                out.append(m._replace(wrap=True))
        return out
    return move


def _each(change):
    return lambda seqs: [change(s) for s in seqs]


def _readings(case: Case, args: dict):
    """(key, how it moves the placements, whether rows it leaves unwritten see nothing) of each wrong reading of
    the packing."""
    lq, lk = lengths(case, args)
    Tq, Tk, mq, mk = sum(lq), sum(lk), max(lq), max(lk)
    for edge in EDGES:
        for key, d in (("varlen-keys-early", -1), ("varlen-keys-late", 1)):
            yield key, _mover(lambda s, d=d: s._replace(k0=s.k0 + d), edge, Tq, Tk), False
        for e in (1, 0):  # one key more, the diagonal placed by the longer count or by the right one
            yield "varlen-keys-overrun", _mover(lambda s, e=e: s._replace(S=s.S + 1, offset=s.offset + e), edge,
                                                Tq, Tk), False
        for d in (-1, 1):  # the rows read and written one off; a row no sequence writes keeps its zeros, or not
            for unwritten in (False, True):
                yield "varlen-queries-shifted", _mover(lambda s, d=d: s._replace(q0=s.q0 + d), edge, Tq, Tk), unwritten
    for unwritten in (False, True):  # each boundary row found with searchsorted(side='left'): the previous one's
        yield "varlen-queries-shifted", _boundary(queries=True), unwritten
    yield "varlen-keys-overrun", _boundary(queries=False), False
    yield "varlen-max-seqlen-k", _each(lambda s: s._replace(S=mk, offset=mk - s.L)), False
    yield "varlen-max-seqlen-k", _each(lambda s: s._replace(S=min(mk, Tk - s.k0), offset=min(mk, Tk - s.k0) - s.L)), \
        False  # a slice cut at the end, the diagonal placed by its length
    if not args.get("causal") and "window" not in args:
        return  # the rest place the diagonal (or the window): without either, nothing to place
    for offset in (lambda s: s.S - mq, lambda s: mk - s.L, lambda s: mk - mq):
        yield "varlen-diagonal-from-max", _each(lambda s, o=offset: s._replace(offset=o(s))), False
    yield "varlen-max-seqlen-k+varlen-diagonal-from-max", _each(lambda s: s._replace(S=mk, offset=mk - mq)), False
    yield "varlen-top-left", _each(lambda s: s._replace(offset=0)), False
    for extra in (0, Tk - Tq):  # the packed rows' own diagonal, top-left or bottom-right
        yield "varlen-causal-packed", _each(lambda s, e=extra: s._replace(offset=s.q0 - s.k0 + e)), False


def _boundary(queries: bool):
    """placements -> each sequence's first query row (or key) given to the sequence before it, as a row's sequence
    found with ``searchsorted(cu_seqlens, row, side='left') - 1`` has it: a sequence takes the next one's first row
    at its own next position, and starts a row late itself (the first sequence's first row goes to none)."""
    def move(seqs):
        rows = [s.L if queries else s.S for s in seqs]
        out = []
        for i, s in enumerate(seqs):
            if not rows[i]:
                out.append(s)
                continue
            grows = any(rows[i + 1:])
            if queries:
                out.append(s._replace(q0=s.q0 + 1, L=s.L - 1 + grows, offset=s.offset + 1))
            else:
                out.append(s._replace(k0=s.k0 + 1, S=s.S - 1 + grows, offset=s.offset - 1))
        return out
    return move


def _read_shifted(case: Case, args: dict, d: int) -> torch.Tensor:
    """(total_q,) the query row each output row is computed from when each sequence reads its queries ``d`` rows
    off but writes its output where it belongs (the packing's ends left alone)."""
    Tq = sum(lengths(case, args)[0])
    rows = torch.arange(Tq)
    for s in placements(case, args):
        if s.q0 + d >= 0 and s.q0 + d + s.L <= Tq:
            rows[s.q0:s.q0 + s.L] = torch.arange(s.q0 + d, s.q0 + d + s.L)
    return rows


def alternatives(case: Case, args: dict):
    """What flash_attn_varlen_func's kernels get wrong, in the oracle's terms: another placement of the sequences
    (a mask), queries read one row off (the query rows), the packing ignored. Each distinct wrong answer once, and
    none that two causes give alike on this case (it cannot tell them apart). A change made on top of another's
    (two bugs at once) moves the placements that one left."""
    from attnlab.judge.explain import Alternative

    lq, lk = lengths(case, args)
    right, seqs = visible(case, args), placements(case, args)
    made = {right.numpy().tobytes(): seqs}  # each mask made here -> the placements it was made from
    alone: set[bytes] = set()  # the masks single changes make: a change on top of another that makes one says nothing
    ties: set[bytes] = set()  # the masks several causes make alike: no change is made on top of one, nor by one
    every = flash.keys_seen(sum(lq), sum(lk), bool(args.get("causal")), tuple(args.get("window", (-1, -1))))
    found: dict[bytes, tuple[set, object]] = {}

    def add(key, m, change, rows=None):
        alone.add(m.numpy().tobytes())
        if not torch.equal(m, right) or (rows is not None and not torch.equal(rows, torch.arange(len(rows)))):
            sig = m.numpy().tobytes() + (b"" if rows is None else rows.numpy().tobytes())
            found.setdefault(sig, (set(), change))[0].add(key)

    add("varlen-packing-ignored", torch.ones_like(right) if every is None else every,
        lambda kw: {**kw, "attn_mask": every})
    for key, move, unwritten in _readings(case, args):
        change = _placed(case, args, made, (alone, ties), move, unwritten)
        add(key, change({"attn_mask": right})["attn_mask"], change)
    for d in (-1, 1):  # the rows only read one off
        rows = _read_shifted(case, args, d)
        add("varlen-queries-shifted", right, lambda kw, r=rows: {**kw, "query": kw["query"][..., r, :]}, rows)
    ties |= {sig[:right.numel()] for sig in tied(found)}
    for key, change in telling(found.values()):
        yield Alternative(key, change)
    window = tuple(args.get("window", (-1, -1)))
    if window[0] != window[1]:  # flash_attn_func's own: the window's sides swapped, in every sequence
        swapped = mask(case, {**args, "window": window[::-1]}, seqs)
        yield Alternative("flash-window-swapped", lambda kw: {**kw, "attn_mask": swapped})
    if args.get("softcap"):  # the soft-cap taken before the scale
        scale = case.E ** -0.5 if case.scale is None else float(case.scale)
        yield Alternative("flash-softcap-scale", flash.modifier_change(mod_cases.CAP, scale))
    sl = flash.slopes(case, args)
    if sl is not None and sl.dim() == 2:  # (B, H) slopes read as one row: every sequence given the first's
        one = score_mod(case, args, sl[0])
        yield Alternative("flash-alibi-one-row", lambda kw: {**kw, "score_mod": one})


def _placed(case: Case, args: dict, made: dict, singles: tuple[set, set], move, unwritten: bool):
    """The change of the oracle's arguments that moves the placements of the mask it is given (on top of another
    change: the placements that one made; never to a mask a single change makes, which that change names, and
    never with a change whose answer several causes give: which of them the pair named would be chance)."""
    right, (alone, ties) = made[next(iter(made))], singles
    mine = []  # this change's own answer, on the right placements

    def change(kw):
        base = kw["attn_mask"]
        seqs = made.get(base.numpy().tobytes()) if isinstance(base, torch.Tensor) else None
        if seqs is None:
            raise ValueError("a mask not made from this case's placements")
        if seqs is not right and (base.numpy().tobytes() in ties or (mine and mine[0] in ties)):
            raise ValueError("a change on top of one of two readings")
        moved = move(seqs)
        if unwritten:
            base = base.clone()
            base[[r for r in range(base.shape[0]) if not any(s.q0 <= r < s.q0 + s.L for s in moved)]] = False
        m = mask(case, args, moved, base)
        sig = m.numpy().tobytes()
        if seqs is right and not mine:
            mine.append(sig)
        elif seqs is not right and sig in alone:
            raise ValueError("two changes that give what one gives")
        made.setdefault(sig, moved)
        return {**kw, "attn_mask": m}
    return change


def case(name: str, lq, lk, causal=False, window=None, softcap=False, alibi=False, **kw) -> Case:
    """A varlen case: one batch of sum(lq) queries and sum(lk) keys."""
    L, S = sum(lq), sum(lk)
    mod = ", ".join(m for m, on in (("softcap", softcap), ("alibi", alibi)) if on)
    return Case(name, batch=(1,), L=L, S=S if S != L else None, mask="varlen", mod=f"flash: {mod}" if mod else None,
                api=words(NAME, q=tuple(lq), k=tuple(lk), causal=causal, window=window, softcap=softcap,
                          **({"alibi": True} if alibi else {})), **kw)


def express(c: Case) -> str:
    return "the grid's cases hold one sequence length per batch; flash-attn-varlen runs its own packed cases"


def extra() -> list[Case]:
    """The packed cases: empty and one-token sequences, many of mixed lengths, more keys than queries (chunked
    prefill, decoding) and fewer, causal, windows, softcap, GQA, odd head dims, large logits, views."""
    mixed = (1, 9, 2, 17, 0, 5, 31, 3, 1, 12, 6, 24)
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
        case("varlen: one sequence, causal, L=97", (97,), (97,), causal=True, H=2),
        case("varlen: five sequences of one token, causal", (1,) * 5, (1,) * 5, causal=True, H=2),
        case("varlen: empty sequences first and last", (0, 7, 12, 0), (0, 7, 12, 0), H=2),
        case("varlen: a sequence with queries and no keys", (3, 5, 4), (6, 0, 7), H=2),
        case("varlen: a sequence with keys and no queries, causal", (5, 0, 6), (5, 9, 6), causal=True, H=2),
        case("varlen: 12 sequences of mixed lengths, causal", mixed, mixed, causal=True, H=2),
        case("varlen: 12 sequences, keys longer (prefix cached), causal", (1, 3, 2, 5, 1, 4, 2, 6, 1, 3, 2, 1),
             (9, 3, 14, 5, 30, 4, 8, 21, 1, 3, 11, 7), causal=True, H=2),
        case("varlen: 12 sequences of mixed lengths", mixed[::-1], mixed[::-1], H=2),
        case("varlen: window (4, 4)", (11, 26, 7), (11, 26, 7), window=(4, 4), H=2),
        case("varlen: window (-1, 2), keys longer", (5, 8, 3), (12, 8, 19), window=(-1, 2), H=2),
        case("varlen: window (3, -1), queries longer", (12, 6), (5, 6), window=(3, -1), H=2),
        case("varlen: window (8, 0), causal, 4 sequences", (23, 2, 40, 9), (23, 2, 40, 9), causal=True,
             window=(8, 0), H=2),
        case("varlen: softcap, keys and queries differ", (13, 29, 6), (20, 29, 2), softcap=True, H=2),
        case("varlen: softcap, window (5, 0), GQA 4/2, causal", (18, 7, 25), (18, 7, 25), causal=True,
             window=(5, 0), softcap=True, H=4, Hkv=2),
        case("varlen: MQA 4/1, causal", (14, 33, 5), (14, 33, 5), causal=True, H=4, Hkv=1),
        case("varlen: GQA 6/2, keys longer, causal", (4, 9, 2), (19, 9, 30), causal=True, H=6, Hkv=2),
        case("varlen: head dim 128, causal", (20, 45), (20, 45), causal=True, H=2, E=128),
        case("varlen: head dim 40, 3 sequences", (7, 30, 15), (7, 30, 15), H=2, E=40),
        case("varlen: large logits, causal", (17, 38, 9), (17, 38, 9), causal=True, H=2, magnitude=LARGE),
        case("varlen: decoding, one query a sequence, causal", (1, 1, 1, 1), (9, 30, 1, 17), causal=True, H=2),
        case("varlen: three queries a sequence, causal", (3, 3, 3), (12, 5, 20), causal=True, H=2),
        case("varlen: scale=-0.5, causal", (10, 21, 6), (10, 21, 6), causal=True, H=2, scale=-0.5),
        case("varlen: transposed views, causal", (12, 20, 9), (12, 20, 9), causal=True, H=2, layout="transposed"),
        case("varlen: one long sequence among short ones", (2, 3, 60), (5, 3, 60), causal=True, H=2),
        case("varlen: GQA 4/2, ALiBi, causal, keys longer", (9, 14, 6), (9, 20, 11), causal=True, alibi=True, H=4,
             Hkv=2),  # (a slope read by the kv head, or placed by packed rows)
        replace(case("varlen: ALiBi (B, H): each sequence its own slopes", (7, 12, 5), (7, 12, 5), H=2),
                mod="flash: alibi", api=words(NAME, q=(7, 12, 5), k=(7, 12, 5), **{"alibi-batch": True})),
        # (as many keys as queries in each sequence: every reading of the diagonal's place agrees there, so the case
        # asks the slopes alone -- varlen's readings of the diagonal move its mask, not ALiBi's distance)
        case("varlen: causal with window (3, 2)", (10, 17, 5), (10, 17, 5), causal=True, window=(3, 2), H=2),
    ]


def _cu(lens, device) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens, dtype=torch.long).cumsum(0).tolist()], dtype=torch.int32,
                        device=device)


def packed(t: torch.Tensor, case: Case) -> torch.Tensor:
    """(1, H, T, D) -> (T, H, D), contiguous or, for the grid's non-contiguous cases, a view."""
    return flash.heads_third(t, case)[0]


def call(fn, q, k, v, case: Case, args: dict, p: float, score_mod=None, sinks=None):
    lq, lk = lengths(case, args)
    kw = {**flash.keywords(case, args, p, q.device), **flash.sink_keyword(sinks)}
    out, lse = flash.split(fn(*(packed(t, case) for t in (q, k, v)), _cu(lq, q.device), _cu(lk, q.device),
                              max(lq), max(lk), **kw, return_attn_probs=True))
    if not isinstance(out, torch.Tensor) or out.dim() != 3:
        return out, lse
    H, T = out.shape[1], out.shape[0]
    problems = []
    if isinstance(lse, torch.Tensor) and lse.dim() == 3 and lse.shape[0] == len(lq) != 1:  # (B, H, max_seqlen_q)
        problems.append(["varlen-lse-padded", f"returned the log-sum-exp as {tuple(lse.shape)}, padded per sequence; "
                                              f"the API's is packed, ({H}, {T})"])
    return out.transpose(0, 1)[None], flash.flat_lse(lse, 1, H, T), problems
