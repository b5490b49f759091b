"""What the failures point to: one line for each cause, with how many cases show it, in which dtypes.

``verify`` says which cases fail and by how much; a person wants to know *why*, and a function
may have several bugs at once. Each failing row carries facts, not sentences
(:class:`attnlab.judge.facts.Facts`, its comparisons, and its hints: the wrong semantics its
output matched, tested row by row in :mod:`attnlab.judge.hypotheses`). The rows are grouped by
cause, and each group is one line:

1. the contract: an output of another dtype, inputs changed in place, an exit, a hang -- certain;
2. wrong semantics a row's output matched: "your output is attention without the 1/sqrt(E) scale";
   where the rows of that hint are exactly the cases of something narrower (a 0-d tensor scale),
   the narrower line comes first;
3. rows nothing explains, read by what their cases exercise (:attr:`attnlab.judge.cases.Case.tags`):
   the tag whose cases (nearly) all fail and which covers most of them is a cause, and so on
   until no such tag is left (so a bug in bfloat16 alone is named for bfloat16, whatever else
   fails); the rest is one "no single pattern" line;
4. exceptions, one line per type and message (numbers in the message aside).

Lines go most cases first, contract first of all. :func:`diagnose` returns :class:`Diagnosis` lines
for one function of a verify result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from attnlab.results import Result


@dataclass(frozen=True)
class Diagnosis(Result):
    key: str  # a stable name for the cause (see TEXT)
    text: str  # one line in plain words
    count: int = 0  # failing cases that show it
    dtypes: list[str] = field(default_factory=list)  # the dtypes of those cases
    example: str = ""  # one of them


TEXT = {
    "oracle": "the oracle and PyTorch disagree on {n} case(s): those cases judge nothing (report it: it is the "
              "judge's bug, not yours)",
    "exit": "calls sys.exit: a function must return its answer, never end the process",
    "ended": "ended the process during case {case!r} (os._exit, or a crash): a function must return its answer",
    "hangs": "a case timed out: is there an endless loop, or a loop over every element in Python?",
    "raises": "raises {type}: {message}",
    "not-a-tensor": "returns something that is not a tensor",
    "shape": "the output's shape is not PyTorch's (..., H, L, Ev)",
    "dtype": "the output's dtype is not the inputs' dtype: compute in higher precision if you like, but return "
             "q.dtype",
    "device": "the output is not on the inputs' device",
    "in-place": "changes the caller's tensors in place: work on new tensors (no masked_fill_, mul_, div_ on inputs)",
    "requires-grad": "changes the inputs' requires_grad",
    "no-lse": "no log-sum-exp comes back: the API returns it when asked (flash-attn's return_attn_probs=True, "
              "flex's return_lse=True, paged decode's return_softmax_lse=True), as (out, lse, ...)",
    "no-grad": "no gradient flows back to q, k, v: is something detached, or computed under torch.no_grad()?",
    "unscaled": "the output is attention without the scale: multiply the scores by 1/sqrt(E) (or by scale=)",
    "scale-1/d": "the output is attention scaled by 1/E: the default scale is 1/sqrt(E)",
    "scale": "fails only where scale= is passed: is the scale argument used (1/sqrt(E) only when it is None)?",
    "scale-tensor": "fails only where scale is a 0-d tensor: PyTorch accepts one (use float(scale))",
    "dead-rows": "rows that see no key are wrong: PyTorch returns zeros there (and zero gradients){returned}",
    "max-subtraction": "large scores overflow: subtract each row's max before exp (exp overflows float32 near 88)",
    "causal-ignored": "is_causal=True is ignored: the output matches attention with no causal mask",
    "diagonal": "the causal mask hides the diagonal: query i sees keys j <= i, itself included",
    "causal-reversed": "the causal mask is turned round: query i sees itself and the keys after it (j >= i), not "
                       "the keys up to it; hide the keys after each query (j > i) instead",
    "mask-zero": "the masked scores are set to 0, not -inf: a future key still gets weight exp(0) (use -inf)",
    "causal-alignment": "only L != S causal cases fail: is_causal is aligned upper-left (query i sees keys j <= i)",
    "lower-right": "only the lower-right causal masks fail (query i sees keys j <= i + S - L, as in KV-cache "
                   "decoding)",
    "mask-ignored": "attn_mask is ignored: the output matches attention with no mask",
    "mask-inverted": "the bool mask is read backwards: True means the key takes part",
    "causal+mask": "fails only where is_causal=True comes with attn_mask: PyTorch keeps the keys both allow",
    "gqa": "only GQA cases fail: query head h uses key head h // (H / Hkv) (repeat_interleave, not repeat)",
    "dropout-scale": "dropout rows: kept weights must be divided by 1 - p",
    "dropout": "only dropout cases fail: drop each weight with probability p and scale the rest by 1/(1 - p)",
    "softmax-dim": "the softmax is taken over the wrong dim: each query's weights over the keys (dim=-1) sum to 1",
    "noncontig": "fails only on non-contiguous inputs (transposed, expanded or sliced views, as transformers "
                 "passes them): use reshape or .contiguous(), not view",
    "float-mask": "only float masks fail: a float attn_mask is added to the scores",
    "bool-mask": "only bool masks fail: False hides a key (-inf before the softmax), True keeps it",
    "broadcast-mask": "only masks that broadcast fail: an (L, S), (N, 1, 1, S) or (H, 1, S) mask broadcasts to "
                      "(N, H, L, S)",
    "mask-fn": "only attnlab's mask functions fail",
    "mod": "only score-modifier cases fail: score_mod(score, b, h, q_idx, kv_idx) changes the scaled score "
           "before the mask",
    "grad-mask": "only cases with a learnable float mask fail: its gradient is dS summed over broadcast dims",
    "batch-dims": "only inputs with no batch dim, or several, fail: take any leading dims (..., H, L, E)",
    "Ev!=E": "only cases where value's last dim Ev differs from E fail",
    "L=1": "only single-query cases (L = 1) fail",
    "L!=S": "only cases with L != S fail: queries and keys may differ in number",
    "bfloat16": "fails only in bfloat16: keep the softmax's max, sums and accumulator in float32",
    "float64": "fails only in float64: is something computed in float32 (a constant, a cast)?",
    "float32": "fails only in float32",
    "precision": "fails in float32 and float64 but passes in bfloat16: something is rounded through half "
                 "precision (the scores, the weights)",
    "gradients-only": "only gradients fail: the output is right; check the backward (a custom autograd.Function?)",
    "unclear": "fails with no single pattern (worst: {worst})",
    "api-mask-ignored": "the API's mask is ignored: the output matches attention with no mask (causal=, "
                        "window_size=, block_mask=, the sequences' packing or the page table left out)",
    "api-top-left": "causal= is aligned top-left (query i sees keys j <= i): FlashAttention aligns it bottom-right, "
                    "query i sees keys j <= i + S - L",
    "lse-only": "only the log-sum-exp fails: the output (and the gradients) are right; lse_i = log sum_j "
                "exp(s_ij), the natural log over row i's scaled, modified and masked scores, in float32",
    "lse-base2": "the log-sum-exp is in base 2 (as a kernel working in exp2 keeps it): the API returns the natural "
                 "log; multiply by ln 2",
    "lse-dead-rows": "the log-sum-exp of a row that sees no key is finite or NaN: the log of an empty sum is -inf "
                     "(FlashAttention's kernel writes +inf there; either is accepted)",
    "causal-offset-sign": "the causal offset has the wrong sign for S > L: query i sees keys j <= i - (S - L); "
                          "is_causal is upper-left (j <= i), lower-right is j <= i + (S - L)",
    "scores-rounded": "the scores are rounded to the inputs' dtype before the softmax: keep them (and the max and "
                      "sum) in float32",
    "dropout-renormalised": "dropout renormalises over the kept weights: divide the kept weights by 1 - p, not by "
                            "their sum",
    "pad-keys": "zero keys padded to a block's multiple are attended: mask the padding (-inf) when S is not a "
                "multiple of the block",
    "backward-mask": "the output is right but the gradients are those of attention under another mask: the "
                     "backward must use the forward's attn_mask and is_causal",
}
SUFFIX = " [{n} case(s), {dtypes}; e.g. {example}]"  # after each line's text: how many, where, one of them
HINTS = {"scale-ignored": "scale", "lower-right-for-upper-left": "causal-alignment",
         "upper-left-for-lower-right": "lower-right", "mask-dropped-with-causal": "causal+mask",
         "causal-dropped-with-mask": "causal+mask", "gqa-repeat": "gqa", "dropout-unscaled": "dropout-scale"}
TAGS = {"scale": "scale", "scale-tensor": "scale-tensor", "upper-left L!=S": "causal-alignment",
        "lower-right": "lower-right", "gqa": "gqa", "dropout": "dropout", "large-logits": "max-subtraction",
        "causal+mask": "causal+mask", "dead-rows": "dead-rows", "noncontig": "noncontig", "transposed": "noncontig",
        "expanded": "noncontig", "sliced": "noncontig", "float-mask": "float-mask", "bool-mask": "bool-mask",
        "broadcast-mask": "broadcast-mask", "mask-fn": "mask-fn", "mod": "mod", "grad-mask": "grad-mask",
        "batch-dims": "batch-dims", "Ev!=E": "Ev!=E", "L=1": "L=1", "L!=S": "L!=S", "bfloat16": "bfloat16",
        "float64": "float64", "float32": "float32"}
SCOPE = {"scale": "scale", "causal-ignored": "causal", "diagonal": "causal", "causal-reversed": "causal",
         "mask-zero": "causal", "causal-alignment": "upper-left L!=S",
         "lower-right": "lower-right", "mask-inverted": "bool-mask", "causal+mask": "causal+mask", "gqa": "gqa",
         "dropout-scale": "dropout", "dead-rows": "dead-rows", "max-subtraction": "large-logits",
         "mask-ignored": ("bool-mask", "float-mask")}  # the cases a hint speaks of (any of the tags)
KINDS = {"oracle": "oracle", "exit": "exit", "lost": "ended", "timeout": "hangs"}  # Facts.kind -> its line
PRECISE = 0.9  # a tag is a cause when at least this share of its cases fail
CONTRAST = 0.5  # ... and less than this share of the cases without it


def diagnose(result, form: str) -> list[Diagnosis]:
    """The causes of ``form``'s failures in a verify result, one line each, most cases first (empty when it passed)."""
    rows = [r for r in result.rows if r.form == form and r.status != "skipped"]
    bad = [r for r in rows if r.status in ("fail", "error")]
    if not bad:
        return []
    first: dict[str, list] = {}  # certain: the oracle's check, the contract, exits and hangs
    causes: dict[str, list] = {}  # what the numbers show
    raised: dict[tuple[str, str], list] = {}
    for r in bad:
        f = r.facts
        if f.kind in KINDS:
            first.setdefault(KINDS[f.kind], []).append(r)
        for p in f.problems:
            first.setdefault(p, []).append(r)
        if f.kind == "raised":
            raised.setdefault((f.raised_type, re.sub(r"\d+", "#", f.raised_message)), []).append(r)
        for h in r.hints:
            if "=" not in h:  # "dead-rows=nan": what a cause's rows hold, said in its line (_fill)
                causes.setdefault(HINTS.get(h, h), []).append(r)
        if not r.hints and _gradients_only(r):
            causes.setdefault("gradients-only", []).append(r)
        elif not r.hints and _lse_only(r):
            causes.setdefault("lse-only", []).append(r)
    numbers = [r for r in bad if r.facts.kind in ("", "raised", "probe") and not r.facts.problems]
    rest = [r for r in numbers if not r.hints and not _gradients_only(r) and not _lse_only(r)]
    lines = [(k, {}, g) for k, g in first.items() if k == "oracle"] + [(k, {}, g) for k, g in first.items()
                                                                        if k != "oracle"]
    found = []
    for key, group in causes.items():
        narrow = _narrower(rows, group, SCOPE.get(key))
        found.append((len(group), len(found), [(narrow, _fill(narrow, group), group)] * (narrow is not None)
                      + [(key, _fill(key, group), group)]))
    for tag, group in _cover(rows, bad, rest):
        found.append((len(group), len(found), [(TAGS.get(tag, tag), _fill(TAGS.get(tag, tag), group), group)]))
        rest = [r for r in rest if r not in group]
    for _, _, entries in sorted(found, key=lambda x: (-x[0], x[1])):
        lines += entries
    for (kind, _), group in sorted(raised.items(), key=lambda x: -len(x[1])):
        msg = group[0].facts.raised_message.splitlines()[0][:160] if group[0].facts.raised_message else ""
        lines.append(("raises", {"type": kind, "message": msg or "(no message)"}, group))
    rest = [r for r in rest if r.facts.kind != "raised"]
    if rest:
        w = rest[0].worst
        lines.append(("unclear", {"worst": f"{w.quantity}: {w.err:.3g} > {w.allowed:.3g}" if w else "-"}, rest))
    return _lines(lines, sorted({r.dtype for r in rows}))


RETURNED = {"nan": "NaN", "mean": "the mean of V (every key weighted alike: a large finite number in place of -inf?)",
            "other": "neither zeros nor NaN"}  # dead-rows=...: what a function returns in the rows that see no key


def _fill(key: str | None, group) -> dict:
    """The values a cause's line says beyond its count: for dead rows, what the function returns there."""
    if key != "dead-rows":
        return {}
    seen = sorted({h.split("=", 1)[1] for r in group for h in r.hints if h.startswith("dead-rows=")},
                  key=list(RETURNED).index)
    return {"returned": "; yours returns " + " or ".join(RETURNED[s] for s in seen) if seen else ""}


def _gradients_only(r) -> bool:
    """The output passed and a gradient failed (and the gradients were there to compare)."""
    return (r.status == "fail" and len(r.comparisons) > 1 and r.comparisons[0].quantity == "out"
            and r.comparisons[0].passed and not r.facts.problems
            and any(not c.passed for c in r.comparisons if c.quantity != "lse"))


def _lse_only(r) -> bool:
    """An API's case whose log-sum-exp alone failed."""
    failed = [c.quantity for c in r.comparisons if not c.passed]
    return r.status == "fail" and failed == ["lse"] and not r.facts.problems


def _narrower(rows, group, scope: str | None) -> str | None:
    """The key of the most specific tag whose cases all fail and hold a hint's ``group``, when the hint does not
    fail its whole scope (a 0-d tensor scale, not every scale=; float masks, not every mask)."""
    if scope is None:
        return None
    scoped = [r for r in rows if set(r.tags) & ({scope} if isinstance(scope, str) else set(scope))]
    if all(r.status != "pass" for r in scoped):
        return None
    best = None
    for t in set.intersection(*(set(r.tags) for r in group)):
        mine = [r for r in rows if t in r.tags]
        if t in TAGS and all(r.status != "pass" for r in mine) and len(mine) < len(scoped):
            best = t if best is None or len(mine) < _support(rows, best) else best
    return None if best is None else TAGS[best]


def _cover(rows, bad, rest):
    """(tag, its rows among ``rest``) for the tags that explain the unexplained rows: at least PRECISE of the
    tag's cases fail and less than CONTRAST of the others, it covers two rows or is one case's alone; each
    time the one that covers most (then the narrowest)."""
    failing = {id(r) for r in bad}
    sets = {t: [r for r in rows if t in r.tags] for t in {t for r in rows for t in r.tags} if t in TAGS}
    half = [r for r in rows if r.dtype in ("bfloat16", "float16")]
    if half and sum(id(r) in failing for r in half) < 0.25 * len(half):  # full precision fails, half passes
        sets["precision"] = [r for r in rows if r.dtype in ("float32", "float64")]
    out = []
    while rest:
        ids = {id(r) for r in rest}
        best = None
        for t, mine in sets.items():
            covered = [r for r in mine if id(r) in ids]
            if not covered or len(mine) == len(rows) or sum(id(r) in failing for r in mine) < PRECISE * len(mine):
                continue
            if len(covered) < 2 and len(mine) > 1:  # one row a wider tag happens to hold says nothing of the tag
                continue
            inside = {id(r) for r in mine}
            others = [r for r in rows if id(r) not in inside]
            if len(others) < 2 or sum(id(r) in failing for r in others) >= CONTRAST * len(others):
                continue  # the cases without the tag fail as much, or too few ran to tell: not what they share
            score = (len(covered), t == "precision", -len(mine))
            if best is None or score > best[0]:
                best = (score, t, covered)
        if best is None:
            return out
        out.append((best[1], best[2]))
        rest = [r for r in rest if id(r) not in {id(x) for x in best[2]}]
    return out


def _support(rows, tag: str | None) -> int:
    """On how many of the rows the case has ``tag`` (None: every row)."""
    return len(rows) if tag is None else sum(tag in r.tags for r in rows)


def _lines(entries, dtypes: list[str]) -> list[Diagnosis]:
    """One Diagnosis per key (the first entry of a key wins), with its count, dtypes and an example."""
    out, seen = [], set()
    for key, fill, group in entries:
        if key in seen and key != "raises":
            continue
        seen.add(key)
        dts = sorted({r.dtype for r in group})
        where = ", ".join(dts) + (" only" if len(dts) < len(dtypes) else "")
        n = len(group)
        case = group[0].case
        text = TEXT[key].format(**{"n": n, "case": case, **fill}) + SUFFIX.format(n=n, dtypes=where, example=case)
        out.append(Diagnosis(key, text, len(group), dts, f"{group[0].case} [{group[0].dtype}]"))
    return out
