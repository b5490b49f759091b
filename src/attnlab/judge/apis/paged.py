"""Attention over a paged KV cache, as FlashAttention's ``flash_attn_with_kvcache`` takes it (and vLLM-style kernels).

    fn(q, k_cache, v_cache, k=None, v=None, cache_seqlens=..., block_table=..., softmax_scale=None, causal=False,
       window_size=(-1, -1), softcap=0.0, return_softmax_lse=True) -> (out, softmax_lse)

q is (B, Lq, H, D): Lq new queries per sequence (1 when decoding). The keys live in pages: ``k_cache`` and
``v_cache`` are (num_blocks, block_size, Hkv, D), and sequence b's key number j is in page
``block_table[b, j // block_size]`` at row ``j % block_size`` (block_table (B, pages) int32). ``cache_seqlens``
(B,) int32 counts the keys in the cache before this call. With ``k`` and ``v`` (B, seqlen_new, Hkv, D), the call
first writes them into the cache **in place**, at positions ``cache_seqlens[b] ... cache_seqlens[b] + seqlen_new
- 1`` of sequence b, then attends: sequence b then has ``cache_seqlens[b] + seqlen_new`` keys (the cache_seqlens
passed is not changed). ``causal=True`` is aligned bottom-right within each sequence: query i of sequence b sits
at key position ``i + S_b - Lq``, S_b its keys; ``window_size`` likewise (:mod:`.flash`). The output is
(B, Lq, H, D) (or (B, H, D) when Lq = 1), the log-sum-exp float32 (B, H, Lq). What a tuple holds after the
log-sum-exp is not judged: FlashAttention 2 returns (out, softmax_lse), FlashAttention 3 ``(out, softmax_lse,
*rest)``, its split-KV accumulators.

In the oracle's terms that is attention of each sequence's Lq queries over its keys gathered back in order,
(B, Hkv, S, D), under a mask per sequence: ``j < S_b`` and the causal and window rules. The judge builds the
pages itself (:mod:`.pages`): shuffled, spare pages and stale slots holding other numbers, each sequence's last
page partly past its length. After the call it checks the cache: the new keys where they belong, nothing else
changed (:func:`cache_problems`). There is no backward: the output and the log-sum-exp are judged.

A kernel that reads the wrong page, ignores ``block_table`` or ``cache_seqlens``, attends past the end or
misplaces the new keys computes attention over other keys, or under another mask: each such reading is a table
of the slots it reads (:func:`attnlab.judge.apis.pages.codes`) and a length per sequence, turned into the
oracle's arguments by the same functions that build the right ones (:func:`alternatives`).
"""

from __future__ import annotations

import math

import torch

from attnlab.judge import mod_cases
from attnlab.judge.apis import flash, pages, telling, tied, words
from attnlab.judge.cases import DTYPES, LARGE, Case
from attnlab.judge.facts import Cause

NAME = "paged-decode"
BACKWARD = False
_PAGE = "key j of sequence b is in page block_table[b, j // block_size], row j % block_size"
_NEW = "positions cache_seqlens[b] ... cache_seqlens[b] + seqlen_new - 1 of sequence b"
CAUSES = (
    Cause('paged-page-id-off', 'pages are read one off in memory: page block_table[b, p] + 1 (or - 1), the page '
                               'beside the right one; ' + _PAGE),
    Cause('paged-table-index-off', "block_table is read one entry off: a key's page is taken from block_table[b, "
                                   'p + 1] (or p - 1), for every key of page p or for its last slot alone (a page '
                                   'found as (j + 1) // block_size); ' + _PAGE),
    Cause('paged-table-ignored', 'block_table is ignored: the pages are read in their order in memory, not looked '
                                 'up; ' + _PAGE),
    Cause('paged-seqlens-ignored', "cache_seqlens is ignored: every slot of a sequence's pages is attended, the "
                                   'stale ones past its length too; sequence b attends its first cache_seqlens[b] '
                                   '(+ seqlen_new) keys'),
    Cause('paged-stale-slots', "a sequence's length is rounded up to whole pages: the stale slots of its last page, "
                               'past cache_seqlens[b] (+ seqlen_new), are attended; mask the keys past its length'),
    Cause('paged-top-left', 'causal= (or window_size=) is aligned top-left (query i sees keys j <= i): with a cache, '
                            'query i of sequence b sits at key position cache_seqlens[b] + seqlen_new - Lq + i '
                            '(bottom-right, as FlashAttention aligns it)'),
    Cause('paged-new-kv-unseen', 'the new keys k=, v= are not attended: sequence b attends only its first '
                                 'cache_seqlens[b] keys; with k=, v= it has cache_seqlens[b] + seqlen_new '
                                 '(cache_seqlens counts the keys before the call)', scope=('append',)),
    # (a claim of every call that appends, causal or not: an append case it passes refutes it -- a kernel that
    # places its queries by the length before the append hides the new keys from causal rows alone)
    Cause('paged-queries-before-append', 'causal= (or window_size=) places the queries by the cache\'s length '
                                         'before the append: query i of sequence b sits at key position '
                                         'cache_seqlens[b] + seqlen_new - Lq + i, after the new keys are counted, '
                                         'not cache_seqlens[b] - Lq + i (the causal rows then miss the new keys)'),
    Cause('paged-new-kv-stale', "the new keys' slots are attended as they were before k=, v= are written: write "
                                'k, v into ' + _NEW + ' first, then attend them'),
    Cause('paged-new-kv-wrong-slot', 'the new k, v are written one position off in the cache: they belong at '
                                     + _NEW + ', ' + _PAGE),
    Cause('paged-cache-not-written', 'k=, v= are not written into the cache: flash_attn_with_kvcache writes them in '
                                     'place into k_cache, v_cache at ' + _NEW + ' (where the next step reads '
                                     'them)'),
    Cause('paged-cache-written', "the cache the call leaves is not the cache with k=, v= written at their positions "
                                 "(what it wrote is measured in the line)"),
    Cause('paged-cache-wrong-slots', 'k=, v= are written into other slots of the cache than theirs: they belong at '
                                     + _NEW + ', ' + _PAGE),
    Cause('paged-cache-touched', "slots of k_cache, v_cache other than the new keys' are changed: the call writes "
                                 'k=, v= into their slots and leaves every other slot (without k=, v=, the whole '
                                 'cache) as it was'),
)


def seqlens(case: Case, args: dict) -> tuple[int, ...]:
    """cache_seqlens: the keys in each sequence's cache before the call."""
    s = args["seqlens"]
    return tuple(s) if isinstance(s, tuple) else (s,)


def totals(case: Case, args: dict) -> tuple[int, ...]:
    """Each sequence's keys once the new ones are in: cache_seqlens[b] + seqlen_new."""
    return tuple(c + args.get("new", 0) for c in seqlens(case, args))


def layout(case: Case, args: dict) -> pages.Layout:
    return pages.layout(case.name, seqlens(case, args), args.get("new", 0), args["block"], case.S)


def visible(case: Case, args: dict, lens=None, offsets=None) -> torch.Tensor:
    """(B, 1, Lq, S) bool: query i of sequence b sees its keys j < S_b under flash_attn_func's rules, at key
    position i + S_b - Lq; ``lens`` and ``offsets`` say where a wrong kernel puts them instead."""
    lens = totals(case, args) if lens is None else lens
    offsets = [n - case.L for n in lens] if offsets is None else offsets
    causal, window = bool(args.get("causal")), tuple(args.get("window", (-1, -1)))
    seen = torch.zeros(len(lens), 1, case.L, case.S, dtype=torch.bool)
    for b, (n, off) in enumerate(zip(lens, offsets, strict=True)):
        block = flash.keys_seen_at(case.L, n, off, causal, window)
        seen[b, 0, :, :n] = True if block is None else block
    return seen


def score_mod(case: Case, args: dict):
    return flash.score_mod(case, args)  # softcap only: ALiBi's distance is per sequence (not among the cases)


def case(name: str, lens, block: int, L: int = 1, new: int = 0, causal=False, window=None, softcap=False,
         **kw) -> Case:
    """A case of B = len(lens) sequences with ``lens`` keys cached, ``new`` appended, ``L`` queries each; the keys
    gathered to S = block * (pages of the longest + 1)."""
    S = block * (math.ceil(max(c + new for c in lens) / block) + 1)
    return Case(name, batch=(len(lens),), L=L, S=S, mask="paged", mod="flash: softcap" if softcap else None,
                api=words(NAME, seqlens=tuple(lens), block=block, new=new or None, causal=causal, window=window,
                          softcap=softcap), **kw)


def express(c: Case) -> Case | str:
    """The grid's plain decoding step (one query, no mask) as a paged call; every other case is not a decode."""
    if c.L != 1 or c.mask is not None or c.mod or c.dropout_p or c.is_causal or (c.Ev or c.E) != c.E:
        return "not a decoding step (one query per sequence over a cache, no mask): paged-decode runs its own cases"
    S = c.S or c.L
    return case(c.name, (S,) * math.prod(c.batch), 16, H=c.H, Hkv=c.Hkv, E=c.E, scale=c.scale, dtype=c.dtype,
                layout=c.layout, magnitude=c.magnitude)


def extra() -> list[Case]:
    """The paged cases: decoding steps, several queries a sequence, new keys appended first, empty and one-key
    caches, lengths at a page's edges, many sequences, pages of 1 to 64 rows, causal, windows (a right side among
    them), softcap, GQA."""
    return [
        case("paged: 3 sequences of 1, 37, 64 keys, pages of 16", (1, 37, 64), 16, H=4),
        case("paged: GQA 8/2, pages of 1", (5, 9), 1, H=8, Hkv=2),
        case("paged: an empty cache", (0, 20), 8, H=2),
        case("paged: scale=0.3, head dim 64, pages of 32", (100, 33), 32, H=2, E=64, scale=0.3),
        case("paged: softcap", (30, 50), 16, H=2, softcap=True),
        case("paged: large logits", (40, 17), 16, H=2, magnitude=LARGE),
        case("paged: one sequence of one key", (1,), 16, H=2),
        case("paged: lengths at a page's edges", (16, 32, 15, 17), 16, H=2),
        case("paged: 8 sequences of mixed lengths, pages of 8", (0, 1, 5, 16, 23, 40, 64, 9), 8, H=2),
        case("paged: 4 queries, causal", (20, 37), 16, L=4, causal=True, H=2),
        case("paged: 4 queries, not causal", (20, 37), 16, L=4, H=2),
        case("paged: 3 queries, causal, a cache shorter than them", (2, 30), 8, L=3, causal=True, H=2),
        case("paged: window (8, 0), causal, 3 queries", (25, 41), 16, L=3, causal=True, window=(8, 0), H=2),
        case("paged: window (5, -1)", (30, 12), 8, window=(5, -1), H=2),
        # (a window's right side shows only where a query has keys after it: several queries, not causal)
        case("paged: window (6, 1), 4 queries, not causal", (30, 19), 8, L=4, window=(6, 1), H=2),
        case("paged: GQA 6/2, 2 queries, causal, pages of 4", (13, 22), 4, L=2, causal=True, H=6, Hkv=2),
        case("paged: MQA 4/1", (19, 44, 7), 16, H=4, Hkv=1),
        case("paged: softcap, causal, 2 queries", (26, 11), 8, L=2, causal=True, softcap=True, H=2),
        case("paged: scale=-0.6, 2 queries, causal", (18, 29), 16, L=2, causal=True, H=2, scale=-0.6),
        case("paged: pages of 64, a long cache", (200, 130), 64, H=2),
        case("paged: head dim 128", (35, 20), 16, H=2, E=128),
        case("paged: append 1 (a decoding step)", (5, 17, 31), 16, new=1, causal=True, H=2),
        case("paged: append 1 to an empty cache", (0, 9), 8, new=1, H=2),
        case("paged: append 1 at a page's end", (15, 16, 31), 16, new=1, causal=True, H=2),
        case("paged: append 4, causal", (10, 3, 28), 16, L=4, new=4, causal=True, H=2),
        case("paged: append 4 across a page's end, causal", (14, 30), 16, L=4, new=4, causal=True, H=2),
        case("paged: append 3, not causal", (9, 21), 8, L=3, new=3, H=2),
        case("paged: append 3, GQA 4/2, causal, pages of 4", (6, 13), 4, L=3, new=3, causal=True, H=4, Hkv=2),
        case("paged: append 2, window (4, 0), causal", (12, 25), 8, L=2, new=2, causal=True, window=(4, 0), H=2),
        case("paged: append 3, window (3, 2), not causal", (10, 21), 8, L=3, new=3, window=(3, 2), H=2),  # (the
        # window's right side reaches the new keys: queries placed before the append and new keys unseen differ)
        case("paged: append 5, softcap, causal", (7, 19), 8, L=5, new=5, causal=True, softcap=True, H=2),
        case("paged: append 2 under 4 queries, causal", (9, 20), 8, L=4, new=2, causal=True, H=2),
        case("paged: append 2, pages of 1", (4, 7), 1, L=2, new=2, causal=True, H=2),
        case("paged: append 3, large logits, causal", (11, 24), 16, L=3, new=3, causal=True, H=2, magnitude=LARGE),
        case("paged: transposed q, 2 queries, causal", (13, 8), 8, L=2, causal=True, H=2, layout="transposed"),
    ]


def _readings(case: Case, args: dict):
    """(key, the slots the new keys are written to (B, new), the slots read (B, S) -- None for both: the right
    ones --, how it changes each sequence's (lengths, offsets), None: it does not) of each wrong way of reading the
    cache. A kernel that reads through a wrong table writes through it too, or writes right."""
    lay = layout(case, args)
    right, table, n, S, L = pages.codes(lay), lay.table, lay.table.shape[1], case.S, case.L
    into = pages.appended(lay, right)
    tables = [("paged-page-id-off", pages.codes(lay, (table + d) % lay.blocks)) for d in (1, -1)]
    tables += [("paged-table-index-off", pages.codes(lay, table.reshape(-1).roll(-d).view_as(table))) for d in (1, -1)]
    tables += [("paged-table-index-off", pages.codes(lay, shift=d)) for d in (1, -1)]  # (j + 1) // block_size
    tables += [("paged-table-ignored", pages.codes(lay, torch.arange(table.numel()).view_as(table))),
               ("paged-table-ignored", pages.codes(lay, torch.arange(n).expand_as(table)))]
    for key, read in tables:
        yield key, pages.appended(lay, read), read, None
        if lay.new:
            yield key, into, read, None
    def rounded(lens):
        return tuple(min(S, -(-t // lay.block) * lay.block) for t in lens)

    for key, longer in (("paged-seqlens-ignored", lambda lens: (S,) * len(lens)), ("paged-stale-slots", rounded)):
        yield key, None, None, lambda lens, offs, f=longer: (f(lens), tuple(t - L for t in f(lens)))
        yield key, None, None, lambda lens, offs, f=longer: (f(lens), offs)  # the diagonal by the right length
    if args.get("causal") or "window" in args:
        yield "paged-top-left", None, None, lambda lens, offs: (lens, (0,) * len(lens))
    if not lay.new:
        return
    def old(lens):
        return tuple(t - lay.new for t in lens)

    if args.get("causal") or "window" in args:  # every key attended, the queries placed by the cache's old length
        yield "paged-queries-before-append", None, None, lambda lens, offs: (lens, tuple(t - L for t in old(lens)))

    yield "paged-new-kv-unseen", None, None, lambda lens, offs: (old(lens), tuple(t - L for t in old(lens)))
    yield "paged-new-kv-unseen", None, None, lambda lens, offs: (old(lens), offs)
    yield "paged-new-kv-stale", pages.appended(lay, right, None), right, None
    for d in (1, -1):
        yield "paged-new-kv-wrong-slot", pages.appended(lay, right, d), right, None


def alternatives(case: Case, args: dict):
    """What paged kernels get wrong, in the oracle's terms: the keys and values another way of writing and reading
    the cache sees (from the same memory), the mask its lengths and alignment make, the window's sides swapped,
    the soft-cap before the scale. Each distinct answer once (several causes that give it alike: each, for the
    diagnosis to settle from the other cases)."""
    from attnlab.judge.explain import Alternative

    at = _Shared(case, args, layout(case, args))
    found: dict[bytes, tuple[set, object]] = {}
    for key, w, r, reshape in _readings(case, args):
        lens, offsets = at.start[:2] if reshape is None else reshape(*at.start[:2])
        sig = at.signature(w, r, visible(case, args, lens, offsets))
        at.alone.add(sig)
        if sig != at.right:
            found.setdefault(sig, (set(), at.change(w, r, reshape, sig)))[0].add(key)
    at.ties |= tied(found)
    for key, change in telling(found.values()):
        yield Alternative(key, change)
    window = tuple(args.get("window", (-1, -1)))
    if window[0] != window[1]:  # flash_attn_func's own: the window's sides swapped
        swapped = visible(case, {**args, "window": window[::-1]})
        yield Alternative("flash-window-swapped", lambda kw: {**kw, "attn_mask": swapped})
    if args.get("softcap"):  # the soft-cap taken before the scale
        yield Alternative("flash-softcap-scale", flash.modifier_change(mod_cases.CAP, case.E ** -0.5 if case.scale
                                                                        is None else float(case.scale)))


class _Shared:
    """What the changes of one case share: the masks made (-> their lengths, offsets and the answer of the change
    that made them), the answers single changes give and those several give alike, one memory per key tensor, the
    tensors the readings gathered (with the answer of the reading)."""

    def __init__(self, case: Case, args: dict, lay: pages.Layout):
        self.case, self.args, self.lay = case, args, lay
        self.codes = pages.codes(lay)
        self.into = pages.appended(lay, self.codes)
        lens = totals(case, args)
        self.start = (lens, tuple(t - case.L for t in lens), None)  # the right lengths, aligned bottom-right
        self.made = {visible(case, args).numpy().tobytes(): self.start}
        self.right = self.signature(None, None, visible(case, args))
        self.alone: set[bytes] = set()
        self.ties: set[bytes] = set()
        self.memories: dict = {}
        self.gathered: list = []

    def signature(self, into, read, m) -> bytes:
        return pages.signature(self.lay, self.into if read is None else into, self.codes if read is None else read, m)

    def change(self, into, read, reshape, mine: bytes):
        """The change of the oracle's arguments this reading makes (``mine``: its answer alone): on top of another
        change, to the lengths and offsets that one made -- never to an answer a single change gives, which that
        change names; never a reading of keys another reading gathered; never with a change whose answer several
        causes give, as which of them the pair named would be chance."""
        case, lay = self.case, self.lay
        heads, dt = case.Hkv or case.H, DTYPES[case.dtype]

        def seen(keys, which):
            if id(keys) not in self.memories:  # (the tensor kept beside its memory, so that its id stays its own)
                self.memories[id(keys)] = (keys, pages.memory(lay, keys, which, heads, dt, _scale(case, which)))
            mem = pages.write(lay, self.memories[id(keys)][1], into, pages.new_keys(lay, keys))
            self.gathered.append((pages.gather(mem, read), mine))
            return self.gathered[-1][0]

        def change(kw):
            state = self.made.get(kw["attn_mask"].numpy().tobytes()) if kw["attn_mask"] is not None else None
            if state is None:
                raise ValueError("a mask not made from this case's lengths")
            under = next((sig for t, sig in self.gathered if kw["key"] is t), None)  # keys a reading gathered
            if (state is not self.start or under is not None) and ({mine, state[2], under} & self.ties):
                raise ValueError("a change on top of one of two readings")
            lens, offsets = state[:2] if reshape is None else reshape(*state[:2])
            m = visible(case, self.args, lens, offsets)
            if read is None and state is not self.start and self.signature(None, None, m) in self.alone:
                raise ValueError("two changes that give what one gives")
            self.made.setdefault(m.numpy().tobytes(), (lens, offsets, mine))
            out = {**kw, "attn_mask": m}
            if read is not None:
                if under is not None:
                    raise ValueError("a reading of keys another reading gathered")
                out["key"], out["value"] = seen(kw["key"], "k"), seen(kw["value"], "v")
            return out

        return change


WRITES = (1, 2)  # k_cache, v_cache: written in place by design, checked here (the judge watches every other argument)


def call(fn, q, k, v, case: Case, args: dict, p: float, score_mod=None, sinks=None):
    """Lay k, v out in pages, call, read the output back into the oracle's layout; with the problems of the
    cache the call leaves."""
    lay = layout(case, args)
    heads = case.Hkv or case.H
    with torch.no_grad():
        mems = [pages.memory(lay, t.detach(), w, heads, scale=_scale(case, w)) for t, w in ((k, "k"), (v, "v"))]
        if case.probe:  # a probe's values: every slot that holds no key of a sequence holds e_(D-1), so weight there
            mems[1] = pages.coded(lay, mems[1])  # shows past the one-hot keys (attnlab.judge.probes)
        caches = [pages.cache(lay, m.clone()) for m in mems]
        kw = {key: val for key, val in flash.keywords(case, args, p, q.device).items() if key != "dropout_p"}
        kw.update(flash.sink_keyword(None if sinks is None else sinks.detach()))
        if lay.new:
            kw["k"], kw["v"] = (pages.new_keys(lay, t.detach()).contiguous() for t in (k, v))
        kw["cache_seqlens"] = torch.tensor(lay.lens, dtype=torch.int32, device=q.device)
        kw["block_table"] = lay.table.to(device=q.device, dtype=torch.int32)
        qq = flash.heads_third(q.detach(), case)
        out, lse = flash.split(fn(qq, *caches, **kw, return_softmax_lse=True))
    problems = cache_problems(case, args, caches, mems, [kw.get("k"), kw.get("v")])
    if not isinstance(out, torch.Tensor) or out.dim() not in (3, 4):
        return out, lse, problems
    B, H, L = q.shape[0], q.shape[1], q.shape[2]
    out = out.reshape(B, H, 1, out.shape[-1]) if out.dim() == 3 else out.transpose(1, 2)
    return out, flash.flat_lse(lse, B, H, L), problems


def _scale(case: Case, which: str) -> float:
    """How large the cache's other numbers are: keys as large as the case's (its large logits), values as drawn; in
    a probe's cache zeros (attnlab.judge.probes: a slot that holds no key adds weight on nothing)."""
    if case.probe:
        return 0.0
    return case.magnitude if which == "k" else 1.0


def cache_problems(case: Case, args: dict, got, given, new) -> list[list[str]]:
    """[key, sentence] for a cache the call left wrong: ``got`` (k_cache, v_cache) as it left them, ``given`` the
    slots as it received them, ``new`` (k, v) as passed. Written through a wrong table, or a position off, the
    cache says the same cause as the output would."""
    lay = layout(case, args)
    right = pages.appended(lay, pages.codes(lay))

    def leaves(into):
        return all(torch.equal(g, pages.cache(lay, m if into is None else pages.write(lay, m, into, t)))
                   for g, m, t in zip(got, given, new, strict=True))

    if leaves(right if lay.new else None):
        return []
    measured = "; ".join(written(lay, got, given, new))
    if lay.new and leaves(None):
        return [["paged-cache-not-written", "wrote nothing into k_cache, v_cache: k=, v= belong at " + _NEW]]
    keys = sorted({key for key, into, read, _ in _readings(case, args)
                   if read is not None and not torch.equal(into, right) and leaves(into)})
    if len(keys) == 1:  # written as one wrong reading would: that reading's cause
        return [[keys[0], f"wrote k=, v= into other slots of the cache than {_NEW}: {measured}"]]
    if keys:  # as two would alike: neither
        return [["paged-cache-wrong-slots", f"wrote k=, v= where {' or '.join(keys)} would, not at {_NEW}: "
                                            f"{measured}"]]
    if not lay.new:
        return [["paged-cache-touched", f"changed k_cache, v_cache, though no k=, v= were passed: {measured}"]]
    at = right.reshape(-1).to(got[0].device)
    if all(torch.equal(g.reshape(lay.slots, *g.shape[2:])[at], t.reshape(-1, *t.shape[2:]))
           for g, t in zip(got, new, strict=True)):  # the new keys in their slots, and other slots changed
        return [["paged-cache-touched", f"changed slots of k_cache, v_cache besides the new keys': {measured}"]]
    return [["paged-cache-written", f"k_cache, v_cache do not hold k=, v= at {_NEW}: {measured}"]]


def written(lay: pages.Layout, got, given, new) -> list[str]:
    """What the call wrote, measured from the caches it left (``got`` (k_cache, v_cache)) against the slots it was
    given (``given``, (slots, Hkv, D) each) and the new rows (``new`` (k, v), (B, new, Hkv, D) or None): where each new
    row went -- its own slot, another slot (said as a sequence's position where the slot is one), the other cache --
    and which other slots changed. The facts a wrong write is read from, in the cache's own terms."""
    codes = pages.codes(lay)
    where = {int(codes[b, j]): (b, j) for b in range(lay.B) for j in range(lay.S)}
    right = pages.appended(lay, codes)
    left = [g.reshape(lay.slots, *g.shape[2:]).cpu() for g in got]
    before = [m.cpu() for m in given]
    facts, expected = [], set()
    for c, (name, rows) in enumerate(zip(("k", "v"), new, strict=True)):
        if rows is None:
            continue
        rows = rows.cpu()
        for b in range(lay.B):
            for t in range(lay.new):
                slot = int(right[b, t])
                expected.add((c, slot))
                if torch.equal(left[c][slot], rows[b, t]):
                    continue
                at = [(cc, s) for cc in (0, 1) for s in range(lay.slots)
                      if torch.equal(left[cc][s], rows[b, t]) and not torch.equal(before[cc][s], rows[b, t])]
                said = ", ".join(f"{'k_cache' if cc == 0 else 'v_cache'} slot {s}" + (
                    f" (sequence {where[s][0]}'s position {where[s][1]})" if s in where else " (no sequence's slot)")
                    for cc, s in at[:2]) or "nowhere"
                facts.append(f"{name}= of sequence {b}, token {t} went to {said}; it belongs in "
                             f"{'k_cache' if c == 0 else 'v_cache'} slot {slot} (position {lay.lens[b] + t})")
                if len(facts) >= 3:
                    return facts
    changed = [(c, s) for c in (0, 1) for s in range(lay.slots)
               if (c, s) not in expected and not torch.equal(left[c][s], before[c][s])]
    if changed:
        first = ", ".join(f"{'k_cache' if c == 0 else 'v_cache'} slot {s}" + (
            f" (sequence {where[s][0]}'s position {where[s][1]})" if s in where else "") for c, s in changed[:3])
        facts.append(f"{len(changed)} other slot(s) changed: {first}")
    return facts
