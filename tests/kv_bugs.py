"""Kernels written to flash_attn_varlen_func and to a paged flash_attn_with_kvcache, right and with the bugs such
kernels have, one switch each (in the style of tests/mutants.py): the regression corpus of the varlen and paged
diagnoses (tests/judge/test_kv_bugs.py).

Each kernel is a plain loop over the sequences, as a kernel author writes a reference, independently of the
semantics the judge writes in attnlab.judge.apis. ``MUTANTS`` maps a name to (the function, the API, its bug
switches, the keys of attnlab.judge.causes that state its bugs); :func:`judge` runs one through verify and
:class:`Outcome` says what became of it, as tests/corpus.py does for the SDPA corpus.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from attnlab.judge import apis, registry, verify
from tests.api_functions import band
from tests.helpers import named


def _softmax_v(q, k, v, scale, seen, softcap):
    """q (H, L, D), k, v (Hkv, S, D), seen (L, S) or (H, L, S) -> out (H, L, D), lse (H, L) float32."""
    dt = q.dtype
    q, k, v = (t.float() if dt != torch.float64 else t for t in (q, k, v))
    G = q.shape[0] // max(k.shape[0], 1)
    k, v = k.repeat_interleave(G, dim=0), v.repeat_interleave(G, dim=0)
    s = q @ k.transpose(-2, -1) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    s = s.masked_fill(~seen, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    return (p @ v).to(dt), lse


def varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False, *, bug=()):
    """flash_attn_varlen_func, one sequence at a time, with ``bug`` (names) switched on. ALiBi is refused as
    unsupported (attnlab.Unsupported): these kernels do not add it, and one that took alibi_slopes and left them
    out would be wrong (the judge's ALiBi probe fails it)."""
    if alibi_slopes is not None:
        import attnlab

        raise attnlab.Unsupported("alibi_slopes: the corpus's varlen kernels do not add ALiBi")
    Tq, H, D = q.shape
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    if "packing-ignored" in bug:
        cq, ck = [0, cq[-1]], [0, ck[-1]]
    out = torch.zeros_like(q)
    lse = torch.full((H, Tq), -math.inf, dtype=torch.float32 if q.dtype != torch.float64 else q.dtype,
                     device=q.device)
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if "keys-early" in bug:
            k0, k1 = k0 - 1, k1 - 1
        if "keys-late" in bug:
            k0, k1 = k0 + 1, k1 + 1
        if "keys-overrun" in bug:
            k1 += 1
        if "max-seqlen-k" in bug:
            k1 = k0 + max_seqlen_k
        if "queries-shifted" in bug:
            q0, q1 = q0 + 1, q1 + 1
        qs, ks, vs = q[q0:q1], k[k0:k1], v[k0:k1]
        L, S = qs.shape[0], ks.shape[0]
        if "stop-at-empty" in bug and (L == 0 or S == 0):
            break  # the sequences after an empty one keep zero output and -inf lse
        if L == 0:
            continue
        offset = 0 if "top-left" in bug else S - L
        if "causal-packed" in bug:  # query row and key row compared as packed rows
            offset = q0 - k0
        seen = band(L, S, offset, causal, window_size, q.device)
        o, l_ = _softmax_v(qs.transpose(0, 1), ks.transpose(0, 1), vs.transpose(0, 1), scale, seen, softcap)
        out[q0:q1] = o.transpose(0, 1)[:out[q0:q1].shape[0]]
        lse[:, q0:q1] = l_[:, :lse[:, q0:q1].shape[1]].to(lse.dtype)
    return (out, lse, None) if return_attn_probs else out


def paged(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None, causal=False,
          window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, *, bug=()):
    """flash_attn_with_kvcache over pages, one sequence at a time, with ``bug`` (names) switched on."""
    B, Lq, H, D = q.shape
    bs = k_cache.shape[1]
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    table = block_table.long()
    if "page-id+1" in bug:
        table = (table + 1) % k_cache.shape[0]
    if "table-index+1" in bug:
        table = table.reshape(-1).roll(-1).view_as(table)
    if "table-ignored" in bug:
        table = torch.arange(table.numel(), device=table.device).view_as(table)
    lens = [int(n) for n in cache_seqlens]
    new = 0 if k is None else k.shape[1]

    def gather(cache, b):
        return cache[table[b]].flatten(0, 1).transpose(0, 1)  # (Hkv, pages * bs, D)

    def append():
        for b in range(B):
            for t in range(new):
                j = lens[b] + t + (1 if "append-late" in bug else 0)
                k_cache[table[b, j // bs], j % bs] = k[b, t]
                v_cache[table[b, j // bs], j % bs] = v[b, t]

    if new and not {"not-appended", "appended-after"} & set(bug):
        append()
    outs, lses = [], []
    for b in range(B):
        kk, vv = gather(k_cache, b), gather(v_cache, b)
        S = lens[b] + (0 if "not-appended" in bug else new)
        if "seqlens-ignored" in bug:
            S = kk.shape[1]
        if "stale-slots" in bug:
            S = -(-S // bs) * bs
        offset = 0 if "top-left" in bug else S - Lq
        if "before-append" in bug:  # the queries placed by the cache's length before the append
            offset = lens[b] - Lq
        seen = band(Lq, kk.shape[1], offset, causal, window_size, q.device)
        seen &= torch.arange(kk.shape[1], device=q.device)[None, :] < S
        o, l_ = _softmax_v(q[b].transpose(0, 1), kk, vv, scale, seen, softcap)
        outs.append(o.transpose(0, 1))
        lses.append(l_)
    if new and "appended-after" in bug:
        append()
    if "cache-zeroed" in bug:  # clears the slots past each sequence's end in its last page
        for b in range(B):
            end = lens[b] + new
            if end % bs:
                k_cache[table[b, end // bs], end % bs:] = 0
    if "seqlens-bumped" in bug:
        cache_seqlens += new or 1
    out, lse = torch.stack(outs), torch.stack(lses)
    return (out, lse) if return_softmax_lse else out


def _mutant(fn, bug, name):
    f = functools.partial(fn, bug=(bug,) if isinstance(bug, str) else tuple(bug))
    f.__name__ = f.__qualname__ = name
    return f


V, P = "flash-attn-varlen", "paged-decode"
# name -> (function, API, its bug switches, its bugs: each the key of attnlab.judge.causes that states it, or a tuple
# of keys any of which does -- a kernel that writes nothing into the cache and attends only the old keys has both)
MUTANTS = {
    "varlen keys one row early": (varlen, V, "keys-early", ("varlen-keys-early",)),
    "varlen keys one row late": (varlen, V, "keys-late", ("varlen-keys-late",)),
    "varlen end inclusive": (varlen, V, "keys-overrun", ("varlen-keys-overrun",)),
    "varlen max_seqlen_k for every sequence": (varlen, V, "max-seqlen-k", ("varlen-max-seqlen-k",)),
    "varlen queries one row late": (varlen, V, "queries-shifted", ("varlen-queries-shifted",)),
    "varlen causal top-left": (varlen, V, "top-left", ("varlen-top-left",)),
    "varlen causal on packed rows": (varlen, V, "causal-packed", ("varlen-causal-packed",)),
    "varlen packing ignored": (varlen, V, "packing-ignored", ("varlen-packing-ignored",)),
    # no cause's words say it: the probe's measured rows, or "no single pattern" where no probe ran (three varlen
    # readings that also empty some of those rows were named on them once: attnlab.judge.explain's only_empty)
    "varlen stops at an empty sequence": (varlen, V, "stop-at-empty", (("measured:visibility", "unclear"),)),
    "varlen keys early, top-left": (varlen, V, ("keys-early", "top-left"), ("varlen-keys-early", "varlen-top-left")),
    "varlen overrun, packed causal": (varlen, V, ("keys-overrun", "causal-packed"),
                                      ("varlen-keys-overrun", "varlen-causal-packed")),
    "paged page id + 1": (paged, P, "page-id+1", ("paged-page-id-off",)),
    "paged table entry + 1": (paged, P, "table-index+1", ("paged-table-index-off",)),
    "paged table ignored": (paged, P, "table-ignored", ("paged-table-ignored",)),
    "paged cache_seqlens ignored": (paged, P, "seqlens-ignored", ("paged-seqlens-ignored",)),
    "paged whole last page": (paged, P, "stale-slots", ("paged-stale-slots",)),
    "paged causal top-left": (paged, P, "top-left", ("paged-top-left",)),
    "paged queries placed before the append": (paged, P, "before-append", ("paged-queries-before-append",)),
    "paged k, v not appended": (paged, P, "not-appended", (("paged-cache-not-written", "paged-new-kv-unseen"),)),
    "paged k, v appended after attending": (paged, P, "appended-after", ("paged-new-kv-stale",)),
    "paged k, v one slot late": (paged, P, "append-late", ("paged-new-kv-wrong-slot",)),
    "paged clears the stale slots": (paged, P, "cache-zeroed", ("paged-cache-touched",)),
    "paged bumps cache_seqlens": (paged, P, "seqlens-bumped", ("in-place",)),
    "paged page id + 1, whole last page": (paged, P, ("page-id+1", "stale-slots"),
                                           ("paged-page-id-off", "paged-stale-slots")),
    "paged top-left, one slot late": (paged, P, ("top-left", "append-late"),
                                      ("paged-top-left", "paged-new-kv-wrong-slot")),
}
CORRECT = {"varlen, one sequence at a time": (varlen, V), "paged, one sequence at a time": (paged, P)}


def function(name: str):
    """The mutant (or right kernel) ``name`` as a function with the API's signature."""
    if name in CORRECT:
        fn, _ = CORRECT[name]
        return _mutant(fn, (), name)
    fn, _, bug, _ = MUTANTS[name]
    return _mutant(fn, bug, name)


# the blind corpus's labels (tests/api_mutants.py) as the keys of the lines that name them (any one names it)
LABEL_KEYS = {
    "varlen-key-leak": ("varlen-keys-early", "varlen-keys-late", "varlen-keys-overrun"),
    "varlen-query-leak": ("varlen-queries-shifted",),
    "varlen-max-seqlen": ("varlen-max-seqlen-k",),
    "varlen-causal-packed": ("varlen-causal-packed",),
    "varlen-causal-top-left": ("varlen-top-left",),
    "new:causal-offset-from-max-lengths": ("varlen-diagonal-from-max",),
    "new:lse-padded-per-sequence": ("varlen-lse-padded",),
    "paged-page-offset": ("paged-page-id-off", "paged-table-index-off"),
    "paged-table-ignored": ("paged-table-ignored",),
    "paged-seqlens-ignored": ("paged-seqlens-ignored",),
    "paged-stale-slots": ("paged-stale-slots",),
    "paged-append-wrong-slot": ("paged-new-kv-wrong-slot",),
    "paged-append-missing": ("paged-new-kv-stale", "paged-new-kv-unseen", "paged-cache-not-written"),
    "causal-top-left": ("paged-top-left", "varlen-top-left", "api-top-left"),
    "dead-rows-nan": ("dead-rows",),
    "new:gqa-heads-by-repeat": ("gqa",),
    "softcap-before-scale": ("flash-softcap-scale",),
    "lse-base2": ("lse-base2",),
    "scores-low-precision": ("scores-rounded",),
    "scale-folded-low-precision": ("scale-folded",),
}
NOT_CAUSES = registry.NAMES_NOTHING  # what happened, or what the failing cases share: no cause
WRITES = ("paged-page-id-off", "paged-table-index-off", "paged-table-ignored", "paged-new-kv-wrong-slot")
# what else a line may truthfully say of a bug: a kernel that writes k=, v= through a wrong table, or a slot off,
# writes them into other slots than theirs (the general lines: other slots, or a cache left other than the spec's,
# where two wrong tables would write alike); rows
# that see no key hold NaN ("dead-rows=nan" is said in the dead-rows line)
ALSO = {key: ("paged-cache-wrong-slots", "paged-cache-written") for key in WRITES}


@dataclass
class Outcome:
    name: str
    bugs: tuple  # each bug: the keys any of which names it
    counts: dict
    keys: list  # the diagnoses, most likely first
    failed: list = field(default_factory=list)  # the names of the failing cases

    @property
    def killed(self) -> bool:
        return self.counts["fail"] + self.counts["error"] > 0

    @property
    def first(self) -> bool:
        """A single bug named by the first line; several: every one among the lines."""
        if len(self.bugs) == 1:
            return bool(self.keys) and self.keys[0] in self.bugs[0]
        return self.named

    @property
    def named(self) -> bool:
        return all(any(k in self.keys for k in bug) for bug in self.bugs)

    @property
    def false(self) -> list[str]:
        """Lines that name a cause the kernel does not have."""
        ok = {k for bug in self.bugs for key in bug for k in (key, *ALSO.get(key, ()))}
        return [k for k in self.keys if k not in ok and k not in NOT_CAUSES]


def bugs_of(want) -> tuple:
    """Each bug as the tuple of keys that name it (a key alone is a tuple of one)."""
    return tuple((b,) if isinstance(b, str) else tuple(b) for b in want)


def judge(name: str, fn, api: str, want, dtypes=("float32",), seed: int = 0, only=None, backward=True) -> Outcome:
    """Run ``fn`` (written to ``api``) through verify on the API's own cases (``only``: names containing one of
    these) and read the diagnoses; ``backward=False``: the output and the log-sum-exp alone."""
    cases = [c for c in apis.cases(api, list(dtypes), long=False) if apis.skip_reason(c) is None
             and (only is None or any(o in c.name for o in only))]
    r = verify.verify({name: apis.Adapted(fn, api)}, cases, check_dropout=False, timeout=None, seed=seed,
                      backward=backward)
    counts = {s: sum(row.status == s for row in r.rows) for s in ("pass", "fail", "error", "skipped")}
    return Outcome(name, bugs_of(want), counts, named(r.diagnoses.get(name, [])),
                   [row.case for row in r.rows if row.status in ("fail", "error")])


def failures(outcomes) -> list[str]:
    """What the outcomes miss of the bar: a single bug not named first, two-bug kernels not all named in at least
    90 % of them, a line naming a bug the kernel does not have, a right kernel failed."""
    single = [o for o in outcomes if len(o.bugs) == 1]
    multi = [o for o in outcomes if len(o.bugs) > 1]
    out = [f"not named first: {o.name}: {o.keys}" for o in single if not o.first]
    if sum(o.named for o in multi) < 0.9 * len(multi):
        out += [f"not all named: {o.name}: {o.keys}" for o in multi if not o.named]
    out += [f"false lines: {o.name}: {o.false}" for o in outcomes if o.false]
    return out + [f"right kernel failed: {o.name}: {o.keys}" for o in outcomes if not o.bugs and o.killed]


def table(outcomes) -> str:
    lines = [f"{'KILLED' if o.killed else 'ALIVE '}  {o.name[:44]:44s} {o.counts['fail'] + o.counts['error']:3d} "
             f"failing  want {' + '.join('/'.join(b) for b in o.bugs) or '-':40s} got {', '.join(o.keys)}"
             + (f"  FALSE {o.false}" if o.false else "") for o in outcomes]
    single = [o for o in outcomes if len(o.bugs) == 1]
    multi = [o for o in outcomes if len(o.bugs) > 1]
    lines.append(f"killed {sum(o.killed for o in outcomes if o.bugs)} of {sum(bool(o.bugs) for o in outcomes)}; "
                 f"single bugs named first {sum(o.first for o in single)} of {len(single)}; several bugs all among "
                 f"the lines {sum(o.named for o in multi)} of {len(multi)}; false lines "
                 f"{sum(len(o.false) for o in outcomes)}; right kernels failed "
                 f"{sum(o.killed for o in outcomes if not o.bugs)}")
    return "\n".join(lines)
