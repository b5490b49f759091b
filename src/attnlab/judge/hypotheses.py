"""The wrong semantics a failing answer matches: each a mistake people make, computed and compared.

When a function fails a case, its output is held against the oracle's answer to a *slightly
different question* -- the one a common bug answers instead: the scale ignored, the causal mask
shifted off the diagonal, upper-left and lower-right swapped, the mask ignored or inverted, key
heads repeated with ``repeat`` instead of ``repeat_interleave``, dropout's survivors not scaled,
the softmax taken over the queries, future scores set to 0 instead of -inf, the causal mask turned
round, the causal offset's sign flipped for S > L, the scores rounded to a half-precision input's
dtype before the softmax, dropout's survivors renormalised over the kept weights, zero keys padded
to a block's multiple and attended -- and the two a from-scratch version starts with together, no
scale and no causal mask, which name both keys. When the output is right and a gradient is not, the
gradients are held against those of attention under another mask (a backward that forgot it).
If the output agrees with one of them to within the case's own limit (and that answer is really
different from the right one), the row records the mistake's key; the causes
each key is said by are in :mod:`attnlab.judge.causes`.

Two patterns need no second answer: NaN or infinity where the oracle is finite on a case with large
scores (a softmax without the max subtraction), and a difference only on the rows that see no key.
Rows that are wholly NaN are compared as zeros: a mask that leaves a row no key (the diagonal hidden)
gives NaN there through a plain softmax, where that mask's own answer is zeros -- that is the mask's
mistake, not an overflow.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlab.judge import explain, oracle, precision, rule, sink_causes
from attnlab.judge.cases import Case

BLOCKS = (16, 32, 64, 128)  # the tile widths a key length is padded to (pad-keys)


def matches(case: Case, x, mine, exp, comps, learned: tuple = (), slack: float | None = None
            ) -> tuple[list[str], torch.Tensor | None]:
    """(the keys of the wrong semantics the failing output ``mine[0]`` agrees with (see the module docstring), the
    output with those causes taken out, for a precision cause to be looked for in what is left). ``slack``: as
    :func:`attnlab.judge.apis.hints` takes it."""
    if mine is None or not isinstance(mine[0], torch.Tensor) or mine[0].shape != exp.ref[0].shape:
        return [], None
    out, ref = mine[0].detach().double().cpu(), exp.ref[0]
    limit = next((c.allowed for c in comps if c.quantity == "out"), 0.0)
    if not math.isfinite(limit):
        return [], None
    if comps and comps[0].passed:  # the output is right: the fault is in the gradients
        return _backward(case, x, mine, exp, comps), None
    base, alts = questions(case, x, exp, learned)
    ex = explain.explain(out, ref, limit, base, alts, mean_of_v(exp), dead_rows(exp),
                         slack=precision.noise(x.q.dtype, exp.fwd, ref) if slack is None else slack)
    found = ex.keys
    overflow = ~torch.isfinite(out).all(dim=-1) & torch.isfinite(ref).all(dim=-1) & ex.left  # (..., L)
    if bool(overflow.any()) and case.magnitude > 1:
        found.insert(0, "max-subtraction")
    return found, ex.corrected


def questions(case: Case, x, exp, learned: tuple = ()) -> tuple[dict, list]:
    """The oracle's arguments for the case, and the wrong semantics to try against it (a probe's measured rules
    among them)."""
    q, k, v = (t.detach().double().cpu() for t in (x.q, x.k, x.v))
    base = dict(query=q, key=k, value=v, attn_mask=oracle.cpu64(x.dense), is_causal=case.is_causal,
                scale=case.scale, enable_gqa=case.gqa, keep=exp.keep, dropout_p=case.dropout_p,
                score_mod=exp.fresh(torch.float64, "cpu")[0], sinks=x.sinks)
    alts = list(_alternatives(case, x, exp))
    if learned:
        from attnlab.judge.probes import learned as measured

        alts += measured.alternatives(list(learned))
    return base, alts


def _backward(case: Case, x, mine, exp, comps) -> list[str]:
    """["backward-mask"] when the failing gradients are those of attention under another mask (the forward right)."""
    if case.mod is not None or case.dropout_p > 0 or len(mine) < 4 or any(g is None for g in mine[1:4]):
        return []
    q, k, v = (t.detach().double().cpu() for t in (x.q, x.k, x.v))
    dense = oracle.cpu64(x.dense)
    others = ([dict(attn_mask=None, is_causal=False)] if dense is not None or case.is_causal else []) + (
        [dict(attn_mask=None), dict(is_causal=False)] if dense is not None and case.is_causal else [])
    for kw in others:
        alt = oracle.reference(q, k, v, **{**dict(attn_mask=dense, is_causal=case.is_causal, scale=case.scale,
                                                  enable_gqa=case.gqa), **kw}, grad_out=x.grad_out, sinks=x.sinks)
        pairs = [(c, g, a, r) for c, g, a, r in zip(comps[1:4], mine[1:4], alt[1:4], exp.ref[1:4], strict=False)]
        if all(rule.max_err(g, a) <= c.allowed for c, g, a, _ in pairs) and any(
                rule.max_err(a, r) > 2 * c.allowed for c, _, a, r in pairs):
            return ["backward-mask"]
    return []


def _with_causal(dense, keep: torch.Tensor):
    """A dense mask (or None) with the (L, S) bool ``keep`` applied too: the keys both allow."""
    if dense is None:
        return keep
    return dense & keep if dense.dtype == torch.bool else dense.masked_fill(~keep, -math.inf)


def _causal_as(shift: int | None, upper: bool = False):
    """A change that spells is_causal out as another mask: key j seen when j <= i + shift (``upper``: j >= i)."""
    def change(kw):
        L, S = kw["query"].shape[-2], kw["key"].shape[-2]
        ones = torch.ones(L, S, dtype=torch.bool)
        keep = ones.triu() if upper else ones.tril(shift)
        return {**kw, "is_causal": False, "attn_mask": _with_causal(kw["attn_mask"], keep)}
    return change


def _masked_zero(kw):
    """Future keys' scores set to 0 (not -inf): they keep a weight of exp(0) -- as a float mask that cancels them."""
    q, k, E = kw["query"], kw["key"], kw["query"].shape[-1]
    sc = 1.0 / math.sqrt(E) if kw["scale"] is None else float(kw["scale"])
    future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    zero = torch.where(future, -(q @ k.transpose(-2, -1)) * sc, 0.0)
    dense = kw["attn_mask"]
    if dense is not None:  # the mask still applies after
        zero = zero.masked_fill(~dense, -math.inf) if dense.dtype == torch.bool else zero + dense
    return {**kw, "is_causal": False, "attn_mask": zero}


def _padded(pad: int):
    """``pad`` zero keys and values appended and seen (a tile loop that never masks them)."""
    def change(kw):
        L, S = kw["query"].shape[-2], kw["key"].shape[-2]
        m = kw["attn_mask"]
        if kw["is_causal"]:
            m = _with_causal(m, torch.ones(L, S, dtype=torch.bool).tril())
        if m is not None:
            m = torch.nn.functional.pad(m, (0, pad), value=True if m.dtype == torch.bool else 0.0)
        keep = kw.get("keep")
        return {**kw, "key": F.pad(kw["key"], (0, 0, 0, pad)), "value": F.pad(kw["value"], (0, 0, 0, pad)),
                "attn_mask": m, "is_causal": False, "keep": None if keep is None else F.pad(keep, (0, pad), value=True)}
    return change


def tail_dropped(S: int):
    """The alternatives of a tile loop that counts its key tiles with // and never loads the last partial one:
    keys from S - S % b on unseen, for each tile width b that leaves a partial tile -- and where S is shorter than a
    tile, that one partial tile is every key: no key is seen (the output zeros, and no gradient)."""
    whole = next((b for b in BLOCKS if b > S), None)  # the narrowest tile that holds every key
    for b in BLOCKS:
        if (S % b and b < S) or b == whole:
            keep = torch.arange(S) < S - S % b
            yield explain.Alternative("tail-dropped", lambda kw, keep=keep: {
                **kw, "attn_mask": _with_causal(kw["attn_mask"], keep.expand(kw["query"].shape[-2], S))})


def tail_dropped_per_block(L: int, S: int):
    """The alternatives of a kernel that counts each query block's key tiles with //, from the first tile of the keys
    the block sees to the last one it sees (a causal diagonal's or a window's edge): the partial tile at that end is
    never loaded -- for each square tile width that splits the queries or the keys."""
    for b in BLOCKS:
        if b < max(L, S):
            yield explain.Alternative("tail-dropped", lambda kw, b=b: _block_tails_dropped(kw, b))


def causal_tiles_cut(L: int, S: int, shift: int = 0):
    """The alternatives of a tiled causal loop whose key tiles stop too early for the later queries of a tile:
    query tiles of ``bq`` rows, key tiles of ``bk`` keys (bq > bk), and a key tile starting at j0 visited only when
    j0 <= i0 + shift (the query tile's first row, not its last) or j0 < i0 + shift + bk (the stop taken a key tile
    past the first row); the causal mask (key j <= i + ``shift``) inside the tiles visited. Where one of these
    widths' loops would see every key the spec's does, it is yielded once too, unchanged: a passing case then
    refutes the family only if every width of it would have failed there."""
    i, j = torch.arange(L)[:, None], torch.arange(S)[None, :]
    causal = j <= i + shift
    same = False
    for bq in BLOCKS:
        for bk in (b for b in BLOCKS if b < bq):
            i0, j0 = i // bq * bq, j // bk * bk
            for stop in ("first-row", "plus-block"):
                keep = causal & ((j0 <= i0 + shift) if stop == "first-row" else (j0 < i0 + shift + bk))
                if bool((keep == causal).all()):
                    same = True
                    continue
                yield explain.Alternative("causal-tile-skip", lambda kw, keep=keep: {
                    **kw, "attn_mask": _with_causal(kw["attn_mask"], keep), "is_causal": False})
    if same:
        yield explain.Alternative("causal-tile-skip", lambda kw: kw)


def _block_tails_dropped(kw, b: int) -> dict:
    seen = _seen(kw)
    if seen is None:
        raise ValueError("every key seen: the tile count is S's (tail_dropped)")
    L, S = seen.shape[-2:]
    j = torch.arange(S)
    keep = torch.zeros_like(seen)
    for i0 in range(0, L, b):
        rows = seen[..., i0:i0 + b, :].any(dim=-2, keepdim=True)  # (..., 1, S): the keys the block sees
        lo = torch.where(rows, j, S).amin(dim=-1, keepdim=True)
        hi = torch.where(rows, j + 1, 0).amax(dim=-1, keepdim=True)
        first = lo - lo % b
        keep[..., i0:i0 + b, :] = (j >= first) & (j < first + (hi - first).clamp(min=0) // b * b)
    return {**kw, "attn_mask": seen & keep, "is_causal": False}


def not_rescaled(S: int, pages: tuple[int, ...] = ()):
    """The alternatives of an online softmax that does not rescale what it has summed when a key tile raises the
    running max -- the accumulator, the running sum, or both -- for each tile width that splits the keys: answers
    computed from the oracle's own scores (after the modifier and the mask) and values. And of a split softmax
    whose splits (those tiles, or a paged cache's ``pages``) are merged by their sums alone, each split's exps taken
    against its own max and never brought to a common one."""
    for b in BLOCKS:
        if b < S:
            for acc, total in ((False, True), (True, False), (False, False)):
                yield explain.Alternative("online-not-rescaled", lambda kw, b=b, acc=acc, total=total: {
                    **kw, explain.ONLINE: (b, acc, total)})
    widths = tuple(dict.fromkeys((*BLOCKS, *pages)))
    for b in widths:
        if b < S:
            yield explain.Alternative("split-max-dropped", lambda kw, b=b: {**kw, explain.ONLINE: (b, False, False,
                                                                                                  False)})
    if any(b >= S for b in widths):  # a split that holds every key is right: a passing case refutes the widths
        yield explain.Alternative("split-max-dropped", lambda kw: kw)  # only where every one of them fails there


def online(kw: dict, block: int, rescale_acc: bool, rescale_sum: bool, carry: bool = True) -> torch.Tensor:
    """The output of an online softmax over key tiles of ``block`` that rescales its accumulator and its running sum
    only where told to (float64, the oracle's scores and values); ``carry`` False: each tile's exps against that
    tile's own max, not the running one."""
    f = oracle.forward(kw["query"], kw["key"], kw["value"], kw["attn_mask"], kw["is_causal"], kw["scale"],
                       kw["enable_gqa"], score_mod=kw.get("score_mod"))
    s = precision._scores(f)  # (N, H, L, S): -inf where masked
    v = f.v
    m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype)
    total = torch.zeros_like(m)
    acc = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype)
    for j in range(0, s.shape[-1], block):
        st = s[..., j:j + block]
        m_new = torch.maximum(m, st.amax(-1)) if carry else st.amax(-1)
        shift = torch.where(torch.isneginf(m_new), 0.0, m_new)
        alpha = torch.exp(m - shift)
        p = torch.exp(st - shift[..., None])
        total = (total * alpha if rescale_sum else total) + p.sum(-1)
        acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ v[..., j:j + block, :]
        m = m_new
    out = acc / torch.where(total > 0, total, 1.0)[..., None]
    return oracle.unflatten(torch.where((total > 0)[..., None], out, 0.0), f)


def padded_keys(S: int):
    """The alternatives of a tile loop that pads the keys with zeros to a tile's multiple and attends them."""
    for pad in dict.fromkeys((-S) % b for b in BLOCKS if S % b):
        yield explain.Alternative("pad-keys", _padded(pad))


def repeated(G: int):
    """Key head h % Hkv for query head h: ``repeat`` where ``repeat_interleave`` is due."""
    def change(kw):
        k, v = kw["key"], kw["value"]
        lead = [1] * (k.dim() - 3)
        return {**kw, "key": k.repeat(*lead, G, 1, 1), "value": v.repeat(*lead, G, 1, 1), "enable_gqa": False}
    return change


def modified_after_mask(kw, block: int | None = None):
    """The score modifier applied to scores already masked (-inf where hidden), the mask not applied again -- over
    every key, or (``block``) as a tiled kernel does it: only in the tiles it loads (blocks of ``block`` queries by
    ``block`` keys holding a key some query of the block sees), the tiles it skips hidden."""
    mod, q = kw["score_mod"], kw["query"]
    seen = _seen(kw)
    if mod is None or seen is None:
        raise ValueError("no modifier and mask to swap")
    H, L, S = q.shape[-3], q.shape[-2], kw["key"].shape[-2]
    seen = seen.expand(*q.shape[:-3], H, L, S).reshape(-1, H, L, S)  # as the oracle flattens the batch
    loaded = None if block is None else tiles(seen, block)

    def fn(score, b, h, q_idx, kv_idx):
        out = mod(score.masked_fill(~seen, -math.inf), b, h, q_idx, kv_idx)
        return out if loaded is None else out.masked_fill(~loaded, -math.inf)

    return {**kw, "score_mod": fn, "attn_mask": None, "is_causal": False}


def _seen(kw) -> torch.Tensor | None:
    """The keys each query sees under the oracle's arguments (attn_mask and is_causal), bool; None: every key."""
    m, L, S = kw["attn_mask"], kw["query"].shape[-2], kw["key"].shape[-2]
    seen = torch.ones(L, S, dtype=torch.bool).tril() if kw["is_causal"] else None
    if m is not None:
        m = m if m.dtype == torch.bool else ~torch.isneginf(m)
        seen = m if seen is None else m & seen
    return seen


def tiles(seen: torch.Tensor, block: int, reduce=torch.any) -> torch.Tensor:
    """(..., L, S): each block x block tile of ``seen`` made wholly True or False by ``reduce`` over it, the ragged
    edge padded with False (as torch's BlockMask counts a ragged last block partial). With torch.any: the tiles a
    kernel loads, where some query of the block sees some key."""
    L, S = seen.shape[-2:]
    nb, ns = -(-L // block), -(-S // block)
    t = F.pad(seen, (0, ns * block - S, 0, nb * block - L)).reshape(*seen.shape[:-2], nb, block, ns, block)
    return reduce(reduce(t, dim=-1), dim=-2).repeat_interleave(block, -2).repeat_interleave(block, -1)[..., :L, :S]


def modified_after_mask_tiled(L: int, S: int):
    """:func:`modified_after_mask` in a tiled kernel, for each square tile width that splits the queries or the
    keys (a wider tile loads every key some block sees, as the untiled alternative does)."""
    for b in BLOCKS:
        if b < max(L, S):
            yield explain.Alternative("mod-after-mask", lambda kw, b=b: modified_after_mask(kw, b))


def _renormalised(case: Case, q, k, v, dense, keep) -> torch.Tensor:
    """Dropout whose kept weights are divided by their sum, not by 1 - p."""
    f = oracle.forward(q, k, v, dense, case.is_causal, case.scale, case.gqa)
    kept = f.P * keep.to(torch.float64).reshape(f.P.shape)
    total = kept.sum(dim=-1, keepdim=True)
    return oracle.unflatten((kept / torch.where(total == 0, 1.0, total)) @ f.v, f)


def dead_rows(exp) -> torch.Tensor:
    """(..., L) True where a query sees no key (the oracle's weights sum to 0 there)."""
    f = exp.fwd  # the case's one oracle forward (judge.expect)
    return oracle.unflatten(f.P.sum(dim=-1) == 0, f)


def mean_of_v(exp) -> torch.Tensor:
    """(..., L, Ev): each query's mean of its values over every key -- what a row that sees no key gets when a large
    finite number stands in for -inf (every key weighted alike)."""
    f = exp.fwd
    return oracle.unflatten(f.v.mean(dim=-2, keepdim=True).expand(*f.v.shape[:-2], f.P.shape[-2], f.v.shape[-1]), f)


def _set(**over):
    return lambda kw: {**kw, **over}


def _alternatives(case: Case, x, exp):
    """The wrong semantics a failing output is held against (:class:`attnlab.judge.explain.Alternative`)."""
    if case.mod is not None:  # a modifier's own semantics are the question there, and its place before the mask
        yield explain.Alternative("mod-after-mask", modified_after_mask)
        yield from modified_after_mask_tiled(case.L, case.S or case.L)
        return
    q, k, v = (t.detach().double().cpu() for t in (x.q, x.k, x.v))
    dense = oracle.cpu64(x.dense)
    L, S, E = case.L, case.S or case.L, case.E
    A = explain.Alternative
    yield from sink_causes.alternatives(case, x)
    if case.scale is not None:
        yield A("scale-ignored", _set(scale=None))
    yield A("unscaled", _set(scale=1.0))
    yield A("scale-1/d", _set(scale=1.0 / E))
    if case.is_causal:
        yield A("causal-ignored", _set(is_causal=False))
        if dense is not None:
            yield A("mask-dropped-with-causal", _set(attn_mask=None))
            yield A("causal-dropped-with-mask", _set(is_causal=False))
        yield A("diagonal", _causal_as(-1))
        yield A("causal-reversed", _causal_as(None, upper=True))
        if not case.gqa:  # a future key's score set to 0, not -inf: it still gets exp(0) of weight
            yield A("mask-zero", _masked_zero)
        if L != S:
            yield A("lower-right-for-upper-left", _causal_as(S - L))
        if S > L:  # an offset meant to be S - L, taken as L - S
            yield A("causal-offset-sign", _causal_as(L - S))
    if dense is not None and dense.dtype == torch.bool:
        yield A("mask-inverted", lambda kw: {**kw, "attn_mask": ~kw["attn_mask"]})
    if dense is not None and not case.is_causal:
        yield A("mask-ignored", _set(attn_mask=None))
        if case.mask in ("lower-right", "causal_lower_right"):
            yield A("upper-left-for-lower-right", _set(attn_mask=None, is_causal=True))
    if case.gqa:
        yield A("gqa-repeat", repeated(case.H // (case.Hkv or case.H)))
    if case.dropout_p > 0 and exp.keep is not None:
        yield A("dropout-unscaled", _set(dropout_p=0.0))
        yield A("dropout-renormalised", out=_renormalised(case, q, k, v, dense, exp.keep))
    if case.dropout_p == 0:
        yield from not_rescaled(S)
    if case.dropout_p == 0 or exp.keep is not None:
        yield from padded_keys(S)
        yield from tail_dropped(S)
        if case.is_causal and L != S:  # a diagonal off the tiles' corners
            yield from tail_dropped_per_block(L, S)
        if case.is_causal:
            yield from causal_tiles_cut(L, S)
    if dense is None and not case.is_causal and not case.gqa and case.dropout_p == 0:
        sc = 1.0 / math.sqrt(E) if case.scale is None else case.scale
        yield A("softmax-dim", out=torch.softmax(q @ k.transpose(-2, -1) * sc, dim=-2) @ v)
